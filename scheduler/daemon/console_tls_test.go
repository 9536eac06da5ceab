package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// TestConsoleTLSAndMetricsToken: with --tls-auto the console port speaks
// TLS with a certificate kept in the data dir; a client pinning its
// fingerprint connects, one pinning another is refused, curl verifies it as
// a CA; /metrics wants the metrics token and no other.
func TestConsoleTLSAndMetricsToken(t *testing.T) {
	dir := t.TempDir()
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, Tokens: writeTokens(t),
		NoLaunch: true, TLSAuto: true, MetricsToken: "metrics-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	fp := d.TLSFingerprint()
	if len(fp) != 64 {
		t.Fatalf("fingerprint %q", fp)
	}
	if fi, err := os.Stat(filepath.Join(dir, consoleKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("console key: %v %v", fi, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pinned, err := client.TLSConfig(fp, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, d.HTTPAddr(), "view-token", client.WithTLS(pinned), client.WithName("tls-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatalf("pinned client: %v", err)
	}
	c.Close()

	wrong, _ := client.TLSConfig(strings.Repeat("ab", 32), "")
	wc, _ := client.Dial(ctx, d.HTTPAddr(), "view-token", client.WithTLS(wrong), client.WithBackoff(time.Hour, time.Hour))
	defer wc.Close()
	for wc.Status().Err == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if st := wc.Status(); st.State == client.Connected || !strings.Contains(st.Err.Error(), "not the pinned") {
		t.Errorf("client pinning another certificate: %+v", st)
	}
	pc, _ := client.Dial(ctx, d.HTTPAddr(), "view-token", client.WithBackoff(time.Hour, time.Hour))
	defer pc.Close()
	for pc.Status().Err == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if pc.Status().State == client.Connected {
		t.Error("a plain ws:// client connected to the TLS port")
	}

	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	curl := func(args ...string) string {
		out, _ := exec.CommandContext(ctx, "curl", append([]string{"-s", "-o", "/dev/null", "-w", "%{http_code}",
			"--cacert", filepath.Join(dir, consoleCertFile)}, args...)...).Output()
		return string(out)
	}
	base := "https://" + d.HTTPAddr()
	for _, tt := range []struct {
		what string
		args []string
		want string
	}{
		{"health", []string{base + "/api/v1/health"}, "200"},
		{"metrics without a token", []string{base + "/metrics"}, "401"},
		{"metrics with a wrong token", []string{"-H", "Authorization: Bearer nope", base + "/metrics"}, "401"},
		{"metrics with the metrics token", []string{"-H", "Authorization: Bearer metrics-secret", base + "/metrics"}, "200"},
		{"metrics with a viewer token", []string{"-H", "Authorization: Bearer view-token", base + "/metrics"}, "401"},
	} {
		if got := curl(tt.args...); got != tt.want {
			t.Errorf("curl %s: %s, want %s", tt.what, got, tt.want)
		}
	}
}

// TestTokensFileReadableRefused: a scheduler refuses to start on a tokens
// file others can read.
func TestTokensFileReadableRefused(t *testing.T) {
	p := writeTokens(t)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: p, NoLaunch: true})
	if err == nil {
		d.Close(true)
		t.Fatal("started with a world-readable tokens file")
	}
	if !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("error %v does not say what to do", err)
	}
}

// TestTUIOverTLS runs the real `kelpie tui` in tmux against a scheduler
// with --tls-auto: pinning the printed fingerprint it shows the job; with
// another fingerprint it shows the refusal and no job.
func TestTUIOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("the real binary in tmux")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("no tmux")
	}
	dir := t.TempDir()
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, Tokens: writeTokens(t), NoLaunch: true, TLSAuto: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	if _, err := d.Manager.Submit("name: over-tls\nmodel: {kind: softmax}\ndata: {kind: mnist, epochs: 1}\n", "test"); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("view-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, fingerprint, want, never string
	}{
		{"pinned", d.TLSFingerprint(), "over-tls", "disconnected"},
		// The refusal's reason is cut at the screen's width.
		{"other", strings.Repeat("ab", 32), "disconnected from " + d.HTTPAddr(), "over-tls"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A tmux server of its own (-L): a session started while
			// another test's server exits after its last session fails
			// with "server exited unexpectedly".
			session := fmt.Sprintf("kelpie-tls-%d", time.Now().UnixNano())
			tmux := func(args ...string) *exec.Cmd {
				return exec.Command("tmux", append([]string{"-L", session}, args...)...)
			}
			cmd := fmt.Sprintf("%s tui --scheduler %s --token-file %s --tls-fingerprint %s --config -", kelpieBin, d.HTTPAddr(), tokenFile, tt.fingerprint)
			if out, err := tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "40", cmd).CombinedOutput(); err != nil {
				t.Fatalf("tmux: %v\n%s", err, out)
			}
			defer tmux("kill-server").Run()
			screen := ""
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				out, _ := tmux("capture-pane", "-p", "-t", session).Output()
				if screen = string(out); strings.Contains(screen, tt.want) {
					break
				}
			}
			if !strings.Contains(screen, tt.want) || strings.Contains(screen, tt.never) {
				t.Errorf("kelpie tui --tls-fingerprint (%s) shows:\n%s\nwant %q, never %q", tt.name, screen, tt.want, tt.never)
			}
		})
	}
}

// TestAllowOrigin: a browser's WebSocket from another origin is refused
// unless --allow-origin names it, by scheme and host or by a host pattern;
// the scheduler's own host is always allowed. A refused page gets a
// WebSocket closed at once with 1008 and a reason naming --allow-origin
// (a browser shows a page nothing of a 403), before any frame of the
// console; an allowed one gets the console's frames.
func TestAllowOrigin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tt := range []struct {
		allow  []string
		origin string
		ok     bool
	}{
		{nil, "https://dash.example.com", false},
		{nil, "", true}, // not a browser
		{[]string{"https://dash.example.com", "*.corp.example"}, "https://dash.example.com", true},
		{[]string{"https://dash.example.com", "*.corp.example"}, "http://dash.example.com", false},
		{[]string{"https://dash.example.com", "*.corp.example"}, "http://grafana.corp.example", true},
		{[]string{"https://dash.example.com", "*.corp.example"}, "https://evil.example", false},
	} {
		d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: writeTokens(t),
			NoLaunch: true, AllowOrigins: tt.allow})
		if err != nil {
			t.Fatal(err)
		}
		hdr := http.Header{"Authorization": {"Bearer view-token"}}
		if tt.origin != "" {
			hdr.Set("Origin", tt.origin)
		}
		c, _, err := websocket.Dial(ctx, "ws://"+d.HTTPAddr()+console.ConsolePath, &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			t.Errorf("--allow-origin %v, Origin %q: dial: %v; want an upgrade (refused or not)", tt.allow, tt.origin, err)
			d.Close(true)
			continue
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, rerr := c.Read(rctx)
		rcancel()
		c.CloseNow()
		var ce websocket.CloseError
		refused := errors.As(rerr, &ce) && ce.Code == websocket.StatusPolicyViolation && strings.Contains(ce.Reason, "--allow-origin")
		if tt.ok && rerr != nil || !tt.ok && !refused {
			t.Errorf("--allow-origin %v, Origin %q: first read %v; want allowed=%v (a 1008 close naming --allow-origin when not)", tt.allow, tt.origin, rerr, tt.ok)
		}
		d.Close(true)
	}
}
