package console

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

// Role is what a token may do: a viewer watches, an operator also commands.
type Role = consoleapi.Role

// The two roles of the console plane.
const (
	RoleViewer   = consoleapi.RoleViewer
	RoleOperator = consoleapi.RoleOperator
)

// Principal is who holds a token.
type Principal = consoleapi.Principal

// Tokens maps a bearer token to its holder.
type Tokens map[string]Principal

// LoadTokens reads a token file: one `TOKEN ROLE NAME` per line, ROLE viewer
// or operator; blank lines and lines starting with '#' are skipped. Errors
// name the file and line.
//
// The file must not be readable or writable by anyone but its owner (mode
// 0600 or stricter): a token file others can read hands them the console.
func LoadTokens(path string) (Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("console: tokens: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("console: tokens: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("console: tokens file %s has mode %#o: others may read it (it holds the console's bearer tokens); chmod 600 %s", path, perm, path)
	}
	return parseTokens(f, path)
}

// parseTokens is LoadTokens without the file; name is used in errors.
func parseTokens(r io.Reader, name string) (Tokens, error) {
	toks := Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("console: %s:%d: want TOKEN ROLE NAME, got %d fields", name, n, len(f))
		}
		tok, role, who := f[0], Role(f[1]), f[2]
		if role != RoleViewer && role != RoleOperator {
			return nil, fmt.Errorf("console: %s:%d: unknown role %q (want viewer or operator)", name, n, f[1])
		}
		if prev, dup := toks[tok]; dup {
			return nil, fmt.Errorf("console: %s:%d: token of %s repeats the token of %s", name, n, who, prev.Name)
		}
		toks[tok] = Principal{Name: who, Role: role}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("console: %s: %w", name, err)
	}
	return toks, nil
}

// lookup finds a token's holder. It compares against every token in
// constant time per entry, so response timing says nothing about how much
// of a guessed token was right.
func (t Tokens) lookup(token string) (Principal, bool) {
	var found Principal
	ok := 0
	for k, p := range t {
		if subtle.ConstantTimeCompare([]byte(k), []byte(token)) == 1 {
			found, ok = p, 1
		}
	}
	return found, ok == 1 && token != ""
}

// bearer extracts the token of an `Authorization: Bearer TOKEN` header.
func bearer(header string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// fingerprint names a token in the audit log without revealing it.
func fingerprint(token string) string {
	if token == "" {
		return "none"
	}
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:4])
}

// Check reports whether token is one of the tokens, and whose (constant
// time per entry, like the console's own check).
func (t Tokens) Check(token string) (Principal, bool) { return t.lookup(token) }
