package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/agentpb"
)

// A global action reaches most agents through the job's primary agent
// (AgentPeer.Forward), not from the scheduler: the scheduler signs it, so a
// secondary applies only what the scheduler issued and only when the agent
// the scheduler designated forwards it. Another node of the job — a
// server, a worker that is not the primary — cannot make one up.

// ActionDigest is the SHA-256 of c as a secondary receives it: primary
// false, no peers, no signer or signature (deterministic protobuf).
func ActionDigest(c *agentpb.ActionCommand) ([]byte, error) {
	v := proto.CloneOf(c)
	v.Primary, v.Peers, v.Signer, v.Signature = false, nil, nil, nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := sha256.Sum256(b)
	return d[:], nil
}

// SignAction signs c, a global action the agent primary forwards, with
// the scheduler's credentials: it sets c.PrimaryNode, c.Signer and
// c.Signature.
func (c *Credentials) SignAction(cmd *agentpb.ActionCommand, primary string) error {
	if c.ID.Role != RoleScheduler {
		return fmt.Errorf("identity: %s signs no actions; the scheduler does", c.ID)
	}
	signer, ok := c.Cert.PrivateKey.(crypto.Signer)
	if !ok {
		return errors.New("identity: the scheduler's key cannot sign")
	}
	cmd.PrimaryNode, cmd.Signer, cmd.Signature = primary, nil, nil
	d, err := ActionDigest(cmd)
	if err != nil {
		return err
	}
	sig, err := signer.Sign(rand.Reader, d, crypto.SHA256)
	if err != nil {
		return fmt.Errorf("identity: sign action %s: %v", cmd.GetActionId(), err)
	}
	cmd.Signer, cmd.Signature = c.Cert.Certificate[0], sig
	return nil
}

// VerifyAction checks that cmd, forwarded by the node from, was issued by
// the scheduler (its signature, by a scheduler certificate of this node's
// CA) to be forwarded by from (the primary it designated).
func (c *Credentials) VerifyAction(cmd *agentpb.ActionCommand, from string) error {
	if len(cmd.GetSigner()) == 0 || len(cmd.GetSignature()) == 0 {
		return fmt.Errorf("action %s is not signed by the scheduler", cmd.GetActionId())
	}
	cert, err := x509.ParseCertificate(cmd.GetSigner())
	if err != nil {
		return fmt.Errorf("action %s: signer: %v", cmd.GetActionId(), err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: c.Roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: time.Now()}); err != nil {
		return fmt.Errorf("action %s: signer: %v", cmd.GetActionId(), err)
	}
	id, err := FromCertificate(cert)
	if err != nil || id.Role != RoleScheduler {
		return fmt.Errorf("action %s is signed by %s, not the scheduler", cmd.GetActionId(), id)
	}
	key, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return fmt.Errorf("action %s: the scheduler's key is no ECDSA key", cmd.GetActionId())
	}
	d, err := ActionDigest(cmd)
	if err != nil {
		return err
	}
	if !ecdsa.VerifyASN1(key, d, cmd.GetSignature()) {
		return fmt.Errorf("action %s: the scheduler's signature does not match the command", cmd.GetActionId())
	}
	if cmd.GetPrimaryNode() != from {
		return fmt.Errorf("action %s is %s's to forward, not %s's", cmd.GetActionId(), cmd.GetPrimaryNode(), from)
	}
	return nil
}
