package racks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/runtime/netns"
)

func TestPlan(t *testing.T) {
	s, err := spec.Parse("x.yaml", []byte(`name: x
cluster:
  servers: 2
  workers: 3
  max_workers: 4
  links: {host: 100MB/s, uplink: 25MB/s}
  topology:
    server-0: {rack: r0, host: h0}
    worker-0: {rack: r0, host: h0}
    server-1: {rack: r1}
    worker-1: {rack: r1}
    worker-2: {rack: r0}
script:
  - {at: 1s, action: add-server}
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := Plan(s)
	if err != nil {
		t.Fatal(err)
	}
	wantRacks := []string{"r0", "r1", ""}
	wantHosts := [][]string{{"h0", "worker-2"}, {"server-1", "worker-1"}, {"server-2", "worker-3"}}
	if !reflect.DeepEqual(l.Racks, wantRacks) || !reflect.DeepEqual(l.Config.Racks, wantHosts) {
		t.Errorf("racks %q with hosts %v; want %q with %v", l.Racks, l.Config.Racks, wantRacks, wantHosts)
	}
	if l.Hosts["server-0"] != "h0" || l.Hosts["worker-0"] != "h0" || l.Hosts["worker-3"] != "worker-3" {
		t.Errorf("hosts %v", l.Hosts)
	}
	if l.Config.HostLink != "800000000bit" || l.Config.Uplink != "200000000bit" || !l.Config.Gateway {
		t.Errorf("config %+v", l.Config)
	}
	s.Cluster.Topology["worker-0"] = spec.Labels{Rack: "r1", Host: "h0"}
	if _, err := Plan(s); err == nil || !strings.Contains(err.Error(), "holds nodes of racks") {
		t.Errorf("Plan with a host in two racks = %v", err)
	}
}

// kelpieBin is the kelpie binary, built once for the netns tests.
var kelpieBin string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if netns.Available() != nil || testing.Short() {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "kelpie-racks-test")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		kelpieBin = filepath.Join(dir, "kelpie")
		if out, err := exec.Command("go", "build", "-o", kelpieBin, "github.com/kelpie/kelpie/cmd/kelpie").CombinedOutput(); err != nil {
			panic("building kelpie: " + err.Error() + "\n" + string(out))
		}
		return m.Run()
	}()
	os.Exit(code)
}

// ringSpec is an allreduce job on 2 racks of 2 hosts with worker-3's link
// capped, long enough (epochs) to be interrupted.
func ringSpec(epochs int) string {
	return fmt.Sprintf(`name: racks-ring
model: {kind: softmax}
data: {kind: mnist, epochs: %d, seed: 1}
train: {global_batch: 256, lr: 0.1}
cluster:
  workers: 4
  exchange: ring
  hosts: netns
  links: {uplink: 50MB/s}
  topology: {worker-0: {rack: a}, worker-1: {rack: a}, worker-2: {rack: b}, worker-3: {rack: b}}
stragglers:
  - {node: worker-3, kind: link, rate: 20MB/s, start: 0s}
`, epochs)
}

var tagRE = regexp.MustCompile(`namespaces (kn[0-9a-z]+)-\*`)

// leftovers lists what a run under tag left: namespaces, interfaces and
// processes carrying the test's tag.
func leftovers(t *testing.T, tag, procTag string) []string {
	t.Helper()
	names, err := netns.List(tag)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/sys/class/net")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tag) {
			names = append(names, "link "+e.Name())
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && bytes.Contains(env, []byte(procTag)) {
			names = append(names, fmt.Sprintf("process %d", pid))
		}
	}
	return names
}

// startRun starts `kelpie run --json` of src and returns it with the
// network's tag once the network is up.
func startRun(t *testing.T, src, procTag string) (*exec.Cmd, *bytes.Buffer, string, <-chan string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kelpieBin, "run", f, "--json")
	cmd.Env = append(os.Environ(), procTag)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tagCh, lines := make(chan string, 1), make(chan string, 4096)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if m := tagRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				tagCh <- m[1]
				sent = true
			}
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	select {
	case tag := <-tagCh:
		return cmd, &stdout, tag, lines
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("kelpie run did not bring its network up")
	}
	return nil, nil, "", nil
}

// TestRunOnNetns runs a job through `kelpie run` on its own netns network
// three ways — to the end, interrupted, killed — and checks that each
// leaves no namespace, interface or process behind (the last after the
// next run's sweep), and that the finished one trained across the racks.
func TestRunOnNetns(t *testing.T) {
	if kelpieBin == "" {
		t.Skip("needs root and iproute2 (netns); not with -short")
	}
	procTag := fmt.Sprintf("KELPIE_TEST_TAG=racks-%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = netns.Sweep() })

	// To the end.
	cmd, stdout, tag, lines := startRun(t, ringSpec(1), procTag)
	var log strings.Builder
	for l := range lines {
		log.WriteString(l + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kelpie run: %v\n%s", err, log.String())
	}
	var r struct {
		Samples    int64   `json:"samples"`
		Accuracy   float64 `json:"accuracy"`
		CrossBytes int64   `json:"bytes_cross_region"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("result: %v\n%s", err, stdout.String())
	}
	if r.Samples != 60000 || r.CrossBytes == 0 || r.Accuracy < 0.8 {
		t.Errorf("result %+v; want 60000 samples, bytes across the racks and a model that learned", r)
	}
	if !strings.Contains(log.String(), `msg="link straggler" node=worker-3 region="" rate=160000000bit`) {
		t.Errorf("worker-3's link was not capped:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "connected from worker-2") {
		t.Errorf("agents do not report their hosts' names:\n%s", log.String())
	}
	if left := leftovers(t, tag, procTag); len(left) != 0 {
		t.Errorf("after a completed run: %v", left)
	}

	// Interrupted once it trains.
	cmd, _, tag, lines = startRun(t, ringSpec(20), procTag)
	for l := range lines {
		if strings.Contains(l, "worker-3 running") {
			break
		}
	}
	time.Sleep(time.Second)
	_ = cmd.Process.Signal(syscall.SIGINT)
	go drain(lines)
	_ = cmd.Wait()
	if left := leftovers(t, tag, procTag); len(left) != 0 {
		t.Errorf("after an interrupted run: %v", left)
	}

	// Killed: its children die with it; the next sweep removes the network.
	cmd, _, tag, lines = startRun(t, ringSpec(20), procTag)
	for l := range lines {
		if strings.Contains(l, "worker-3 running") {
			break
		}
	}
	_ = cmd.Process.Kill()
	go drain(lines)
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := netns.Sweep(); err != nil {
			t.Fatal(err)
		}
		left := leftovers(t, tag, procTag)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after a killed run and a sweep: %v", left)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// drain reads a run's remaining lines (its own argument: the test reuses
// its lines variable for the next run).
func drain(lines <-chan string) {
	for range lines {
	}
}
