package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/kelpie/kelpie/runtime/psclient"
)

// TestPushPullAllocs holds the README's claim for the whole data path: a
// push or a pull round trip over the framed transport (TCP or the Unix
// socket), worker and server both in this process, allocates one object
// (the response the caller keeps), at 4 KiB and 1 MiB.
//
// make test runs it without the race detector too: under it, allocation
// counts mean nothing.
func TestPushPullAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector (sync.Pool drops items at random)")
	}
	sizes := []int{4 << 10, 1 << 20}
	s, err := StartPS("127.0.0.1:0", 1, sizes, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var prog int64
	for _, tr := range []string{psclient.TransportTCP, psclient.TransportUnix} {
		c, err := psclient.DialWith(context.Background(), s.Addr(), psclient.Options{Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []Op{Push, Pull} {
			for bi, size := range sizes {
				name := fmt.Sprintf("%s/%s/%s", tr, op, FormatSize(size))
				st := &psStream{conn: c, block: uint32(bi), op: op, size: size, payload: make([]byte, size), progress: &prog}
				if _, err := drive(st, 20, 1, nil); err != nil { // warm up: pools and buffers fill once
					t.Fatalf("%s: %v", name, err)
				}
				var runErr error
				n := testing.AllocsPerRun(200, func() {
					tok, err := st.send()
					if err == nil {
						err = st.recv(tok)
					}
					if err != nil && runErr == nil {
						runErr = err
					}
				})
				if runErr != nil {
					t.Fatalf("%s: %v", name, runErr)
				}
				t.Logf("%s: %v allocations per round trip", name, n)
				if n > 1 {
					t.Errorf("%s round trip: %v allocations; want at most 1", name, n)
				}
			}
		}
		c.Close()
	}
}
