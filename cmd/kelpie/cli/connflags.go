package cli

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"

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
