package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kelpie/kelpie/scheduler/console/client"
)

// connFlags are how a console client finds its token and trusts the
// scheduler's TLS certificate, without putting a secret on a command line.
type connFlags struct {
	tokenFile   string
	fingerprint string
	caFile      string
	useTLS      bool
}

func (f *connFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.tokenFile, "token-file", os.Getenv("KELPIE_TOKEN_FILE"), "read the bearer token from this file ($KELPIE_TOKEN_FILE; keeps it off the command line)")
	fs.StringVar(&f.fingerprint, "tls-fingerprint", os.Getenv("KELPIE_TLS_FINGERPRINT"), "connect over TLS, pinning the scheduler certificate's SHA-256 (what kelpie scheduler --tls-auto prints; $KELPIE_TLS_FINGERPRINT)")
	fs.StringVar(&f.caFile, "tls-ca", "", "connect over TLS, verifying the scheduler's certificate against these CA certificates")
	fs.BoolVar(&f.useTLS, "tls", false, "connect over TLS, verifying the scheduler's certificate against the system's roots")
}

// token is the bearer token: from --token-file when given, else tok.
func (f *connFlags) token(tok string) (string, error) {
	if f.tokenFile == "" {
		return tok, nil
	}
	b, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return "", fmt.Errorf("token file: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "", fmt.Errorf("token file %s is empty", f.tokenFile)
	}
	return line, nil
}

// tls is the TLS configuration the flags ask for; nil for plain ws://
// (unless the address itself says wss://).
func (f *connFlags) tls() (*tls.Config, error) {
	if f.fingerprint == "" && f.caFile == "" && !f.useTLS {
		return nil, nil
	}
	return client.TLSConfig(f.fingerprint, f.caFile)
}

// options are the client options for the flags.
func (f *connFlags) options() ([]client.Option, error) {
	cfg, err := f.tls()
	if err != nil || cfg == nil {
		return nil, err
	}
	return []client.Option{client.WithTLS(cfg)}, nil
}

// connected waits for the client's first outcome and fails fast: a
// refused connection or token is said at once, in words, rather than
// retried until the timeout runs out (the console retries for ever; a
// command line does not). addr is what the user gave.
func connected(ctx context.Context, c *client.Client, addr string) error {
	for {
		st := c.Status()
		switch st.State {
		case client.Connected:
			return nil
		case client.Unauthorized:
			return fmt.Errorf("the scheduler at %s refused the token (%s): check --token, --token-file or $KELPIE_TOKEN", addr, refusal(st.Err))
		case client.Disconnected:
			if st.Attempt < c.Addrs() {
				break // replicas: the next address is being tried
			}
			return fmt.Errorf("cannot reach the scheduler at %s: %s (is it running there? --scheduler or $KELPIE_SCHEDULER)", addr, unreachable(st.Err))
		case client.Closed:
			if ctx.Err() != nil {
				return waited(ctx, addr)
			}
			return fmt.Errorf("connection to the scheduler at %s closed", addr)
		}
		select {
		case <-ctx.Done():
			return waited(ctx, addr)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waited says that the scheduler did not answer in time.
func waited(ctx context.Context, addr string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer from the scheduler at %s within --timeout", addr)
	}
	return ctx.Err()
}

// unreachable names why a dial failed: the operating system's words
// when it gave some ("connection refused", "no such host"), else the
// client's error as it is.
func unreachable(err error) string {
	if err == nil {
		return "no connection"
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "no such host", "i/o timeout", "network is unreachable", "connection reset by peer"} {
		if strings.Contains(msg, s) {
			return s
		}
	}
	return msg
}

// refusal is the scheduler's reason for refusing a token, without the
// client's prefix.
func refusal(err error) string {
	if err == nil {
		return "unauthorized"
	}
	return strings.TrimPrefix(err.Error(), "client: unauthorized: ")
}
