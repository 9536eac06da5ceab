package framing

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/pspb"
)

// testTLS makes a CA and TLS configurations for a server and a client
// whose certificates it signed (mutual TLS, as node certificates give).
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(n int64, usage x509.ExtKeyUsage) tls.Certificate {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "node"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{"node"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf(2, x509.ExtKeyUsageServerAuth)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf(3, x509.ExtKeyUsageClientAuth)},
		RootCAs: pool, ServerName: "node"}
	return server, client
}

// TestEncryptedHandshake: with certificates on both ends the frames after
// the handshake travel in TLS (and arrive intact); an end that encrypts
// refuses one that does not, except over a Unix socket, which stays plain.
func TestEncryptedHandshake(t *testing.T) {
	srvTLS, cliTLS := testTLS(t)
	secret := SharedSecret("s3cret")
	for _, tc := range []struct {
		name           string
		server, client *tls.Config
		wantErr        string // from the client; "" for success
		wantEncrypted  bool
		unix           bool
	}{
		{"both encrypt", srvTLS, cliTLS, "", true, false},
		{"neither", nil, nil, "", false, false},
		{"server encrypts, client cannot", srvTLS, nil, "has no certificate", false, false},
		{"client requires, server does not", nil, cliTLS, "does not encrypt", false, false},
		{"unix stays plain", nil, cliTLS, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b *Conn
			if tc.unix {
				a, b = unixPipe(t)
			} else {
				a, b = pipe(t)
			}
			srv := make(chan error, 1)
			go func() {
				err := ServerHandshake(b, secret, tc.server, Hello{HostID: "h"})
				if err == nil {
					// Echo one frame back.
					var h Header
					if h, _, err = b.ReadHeader(); err == nil {
						p := make([]byte, h.Payload)
						if err = b.ReadPayload(p); err == nil {
							err = b.WriteFrame(KindResponse, h.ID, nil, p)
						}
					}
				}
				srv <- err
			}()
			hello, err := ClientHandshake(a, secret, tc.client)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("client handshake = %v; want an error with %q", err, tc.wantErr)
				}
				a.Close()
				<-srv
				return
			}
			if err != nil {
				t.Fatalf("client handshake: %v", err)
			}
			if hello.Encrypted != tc.wantEncrypted || a.Encrypted() != tc.wantEncrypted {
				t.Errorf("hello says encrypted=%v, connection %v; want %v", hello.Encrypted, a.Encrypted(), tc.wantEncrypted)
			}
			// The configurations name no protocol: the transport offers its own.
			if st, ok := a.TLSState(); ok && st.NegotiatedProtocol != ALPN {
				t.Errorf("negotiated protocol %q; want %q", st.NegotiatedProtocol, ALPN)
			}
			payload := bytes.Repeat([]byte("tensor"), 50000)
			if err := a.WriteFrameV(KindRequest, 5, AppendRequest(a.MetaBuf(), &pspb.PSRequest{Op: pspb.Op_OP_PUSH}), [][]byte{payload[:7], payload[7:]}); err != nil {
				t.Fatal(err)
			}
			h, _, err := a.ReadHeader()
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, h.Payload)
			if err := a.ReadPayload(got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, payload) || h.ID != 5 {
				t.Errorf("echo of %d bytes came back as %d bytes (id %d)", len(payload), len(got), h.ID)
			}
			if err := <-srv; err != nil {
				t.Errorf("server: %v", err)
			}
		})
	}
}

// unixPipe is a connected pair of framed Unix socket connections.
func unixPipe(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := lis.Accept()
		acc <- c
	}()
	a, err := net.Dial("unix", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	ca, cb := NewConn(a), NewConn(b)
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}
