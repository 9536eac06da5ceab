package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// okScheduler plays the console API: a welcome, then ok for every command.
func okScheduler(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			switch f.Body.(type) {
			case *consolepb.ClientFrame_Hello:
				err = write(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Welcome{Welcome: &consolepb.Welcome{User: "olga", Role: "operator"}}})
			case *consolepb.ClientFrame_Command:
				err = write(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Result{Result: &consolepb.CommandResult{Id: f.Id, Ok: true}}})
			}
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestApproveSaysWhatItDid: approve and reject print what they did on
// success (they printed nothing).
func TestApproveSaysWhatItDid(t *testing.T) {
	addr := strings.TrimPrefix(okScheduler(t).URL, "http://")
	for verb, want := range map[string]string{"approve": "approved a-7 of job mnist", "reject": "rejected a-7 of job mnist"} {
		code, out := runStdout(t, "job", verb, "mnist", "a-7", "--scheduler", addr, "--token", "t")
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("job %s: exit %d, stdout %q; want %q", verb, code, out, want)
		}
	}
}
