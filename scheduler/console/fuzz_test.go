package console

import (
	"testing"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// FuzzClientFrame feeds arbitrary text to the console's frame decoder and
// the checks a decoded frame goes through (subscription bounds, command
// description): none may panic, every refusal is an error, and a frame
// that decodes survives a protojson round trip.
func FuzzClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","hello":{"token":"op-token"}}`,
		`{"id":"2","subscribe":{"jobs":["a"],"heatmap_columns":60,"max_rate_hz":4}}`,
		`{"id":"3","command":{"submit_job":{"spec_yaml":"name: x\n"}}}`,
		`{"id":"4","command":{"trigger":{"job":"a","action":{"kind":"KILL_RESTART","target":"worker-0","params":{"x":1}}}}}`,
		`{"id":"5","command":{"set_policy":{"job":"a","policy":"antdt-nd","mode":"auto","params":{"lambda":"NaN"}}}}`,
		`{"id":"6","subscribe":{"max_rate_hz":"Infinity","heatmap_columns":-1}}`,
		`{"id":7}`, `[]`, `{"command":{}}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = frameID(data)
		fr, err := decodeFrame(websocket.MessageText, data)
		if err != nil {
			if fr != nil {
				t.Fatalf("decodeFrame returned a frame with error %v", err)
			}
			return
		}
		if s := fr.GetSubscribe(); s != nil {
			_ = checkSubscribe(s)
		}
		if c := fr.GetCommand(); c != nil {
			d, err := describe(c)
			if err == nil && d.kind == "unknown" {
				t.Fatalf("describe(%v) accepted an unknown command", c)
			}
		}
		b, err := protojson.Marshal(fr)
		if err != nil {
			t.Fatalf("a decoded frame does not marshal: %v", err)
		}
		var back consolepb.ClientFrame
		if err := unmarshalFrame.Unmarshal(b, &back); err != nil {
			t.Fatalf("a re-marshalled frame %s does not decode: %v", b, err)
		}
		// Compared as deterministic binary: NaN parameters equal themselves.
		det := proto.MarshalOptions{Deterministic: true}
		b1, _ := det.Marshal(fr)
		b2, _ := det.Marshal(&back)
		if string(b1) != string(b2) {
			t.Fatalf("round trip changed the frame: %v != %v", fr, &back)
		}
	})
}
