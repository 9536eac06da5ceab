package tui

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// syncBuffer is the terminal Run draws on, read by the test while the program writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) contains(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.b.Bytes(), []byte(text))
}

// scheduler plays the console API's server side: welcome, one snapshot per subscription, and
// an ok for every command.
func scheduler(t *testing.T) (*httptest.Server, chan *consolepb.Command) {
	cmds := make(chan *consolepb.Command, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		write := func(f *consolepb.ServerFrame) error {
			b, _ := protojson.Marshal(f)
			return conn.Write(ctx, websocket.MessageText, b)
		}
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			f := &consolepb.ClientFrame{}
			if protojson.Unmarshal(data, f) != nil {
				return
			}
			switch b := f.Body.(type) {
			case *consolepb.ClientFrame_Hello:
				err = write(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Welcome{Welcome: &consolepb.Welcome{User: "alice", Role: "operator"}}})
			case *consolepb.ClientFrame_Subscribe:
				jobs := summaryJobs()
				if len(b.Subscribe.Jobs) > 0 {
					jobs = []*consolepb.JobView{mnistJob()}
				}
				err = write(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Snapshot{Snapshot: &consolepb.Snapshot{Jobs: jobs}}})
			case *consolepb.ClientFrame_Command:
				cmds <- b.Command
				err = write(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Result{Result: &consolepb.CommandResult{Id: f.Id, Ok: true}}})
			}
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, cmds
}

// waitScreen waits until the terminal shows text.
func waitScreen(t *testing.T, out *syncBuffer, text string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !out.contains(text) {
		if time.Now().After(deadline) {
			t.Fatalf("the console never showed %q", text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run end to end: the real client against a scheduler over WebSocket, keys on stdin.
func TestRun(t *testing.T) {
	srv, cmds := scheduler(t)
	in, keys := io.Pipe()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Options{Scheduler: srv.URL, Token: "tok", Job: "mnist-mlp", Theme: "high-contrast",
			In: in, Out: out, Config: "-"})
	}()
	waitScreen(t, out, "persistent▲") // opened on the job, with its nodes
	io.WriteString(keys, "A")
	waitScreen(t, out, "1 pending, 2 in all")
	io.WriteString(keys, "a")
	select {
	case c := <-cmds:
		if c.GetApprove().GetActionId() != "a-7" {
			t.Errorf("approve sent %v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the approval never reached the scheduler")
	}
	waitScreen(t, out, "approve a-7 ADJUST_BS: done")
	io.WriteString(keys, "q")
	waitScreen(t, out, "Quit the kelpie console?")
	io.WriteString(keys, "y")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after q, y")
	}
}

func TestRunStopsWithContext(t *testing.T) {
	in, _ := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	out := &syncBuffer{}
	go func() { // no scheduler at all: the console shows the retry and keeps running
		done <- Run(ctx, Options{Scheduler: "127.0.0.1:1", In: in, Out: out, Config: "-"})
	}()
	waitScreen(t, out, "disconnected")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel = %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
}

func TestRunBadOptions(t *testing.T) {
	for _, o := range []Options{{Scheduler: "ftp://x", Config: "-"}, {Theme: "neon", Config: "-"}} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) = nil; want an error", o)
		}
	}
}
