package console

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestZZDocFrames(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	b := newFakeBackend(&kelpiepb.JobView{Name: "mnist", State: "running", Model: "mlp on mnist", Servers: 2, Workers: 4, Iteration: 1200, Throughput: 5120,
		Nodes: []*kelpiepb.NodeView{{Name: "worker-2", Role: "worker", State: "running", BptShortS: 0.41, BptLongS: 0.39, Class: "persistent", Ratio: 1.9}}})
	b.addEvent(&kelpiepb.Event{Time: timestamppb.New(now), Job: "mnist", Kind: "node", Node: "worker-2", Message: "worker-2 classified persistent straggler"})
	b.execute = func(context.Context, Principal, *kelpiepb.Command) *kelpiepb.CommandResult {
		return &kelpiepb.CommandResult{Ok: true}
	}
	h := newHarness(t, b, Options{Now: func() time.Time { return now }})
	c := h.dial("")
	c.hello("op-secret")
	raw := func() { _, d, _ := c.ws.Read(context.Background()); fmt.Println(string(d)) }
	raw()
	c.subscribe(1, "mnist")
	raw()
	v := *b.views["mnist"]
	v.Iteration = 1210
	b.setJob(&v)
	raw()
	c.sendRaw(1, `{"id":"a1","command":{"approve":{"job":"mnist","actionId":"act-7","reason":"looks right"}}}`)
	raw()
	c2 := h.dial("viewer-secret")
	raw2 := func() { _, d, _ := c2.ws.Read(context.Background()); fmt.Println(string(d)) }
	raw2()
	c2.sendRaw(1, `{"id":"a2","command":{"approve":{"job":"mnist","actionId":"act-7"}}}`)
	raw2()
	c2.sendRaw(1, `{"id":"x","command":`)
	raw2()
}
