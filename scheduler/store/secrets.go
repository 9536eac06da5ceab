package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Secrets keeps small secret values (the node plane's CA key, the key job
// secrets derive from) where every scheduler replica finds them, sealed at
// rest: AES-256-GCM with a key the replicas share, a fresh nonce a value,
// the value's name as additional data (a value moved under another name
// does not open). Only the etcd backend has them: a bbolt scheduler keeps
// its CA and job key as files in its data directory.
type Secrets interface {
	PutSecret(name string, value []byte) error
	// GetSecret is the value of name; false if there is none.
	GetSecret(name string) ([]byte, bool, error)
}

// Secrets is the store's secret keeping; nil for a bbolt store or an etcd
// store opened without a key.
func (s *Store) Secrets() Secrets {
	if e, ok := s.backend.(*etcdStore); ok && e.sealer != nil {
		return e
	}
	return nil
}

// SecretKeySize is the size of the key secrets are sealed with.
const SecretKeySize = 32

// LoadSecretKey reads a secret key file: 32 bytes, or their hex (64
// characters, surrounding white space ignored). Others than its owner and
// group must not be able to read it (a Kubernetes Secret volume with an
// fsGroup is group-readable).
func LoadSecretKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("store: secret key: %w", err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("store: secret key %s is readable by others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store: secret key: %w", err)
	}
	if len(data) == SecretKeySize {
		return data, nil
	}
	if k, err := hex.DecodeString(strings.TrimSpace(string(data))); err == nil && len(k) == SecretKeySize {
		return k, nil
	}
	return nil, fmt.Errorf("store: secret key %s: want %d bytes or their hex, found %d bytes", path, SecretKeySize, len(data))
}

// ErrSealed is returned for a secret that does not open with the key: a
// different key, or a value altered or moved.
var ErrSealed = errors.New("secret does not open with this key")

type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != SecretKeySize {
		return nil, fmt.Errorf("store: secret key: %d bytes, want %d", len(key), SecretKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(name string, value []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(value)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, value, []byte(name)), nil
}

func (s *sealer) open(name string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, ErrSealed
	}
	v, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(name))
	if err != nil {
		return nil, ErrSealed
	}
	return v, nil
}

func (s *etcdStore) PutSecret(name string, value []byte) error {
	if name == "" {
		return ErrEmptyName
	}
	sealed, err := s.sealer.seal(name, value)
	if err != nil {
		return fmt.Errorf("store: put secret %s: %w", name, err)
	}
	return s.commit("put secret "+name, clientv3.OpPut(s.p+"secrets/"+name, string(sealed)))
}

func (s *etcdStore) GetSecret(name string) ([]byte, bool, error) {
	if name == "" {
		return nil, false, nil
	}
	sealed, err := s.getValue("get secret "+name, s.p+"secrets/"+name)
	if err != nil || sealed == nil {
		return nil, false, err
	}
	v, err := s.sealer.open(name, sealed)
	if err != nil {
		return nil, false, fmt.Errorf("store: get secret %s: %w", name, err)
	}
	return v, true, nil
}
