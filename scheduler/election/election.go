// Package election makes one of several scheduler replicas the leader,
// through an etcd lease (go.etcd.io/etcd/client/v3/concurrency): each
// replica campaigns with a key under the election prefix attached to its
// session's lease, and the replica whose key is oldest leads. The lease
// lives while its holder keeps it alive; a leader killed, paused or cut off
// from etcd for longer than the lease's TTL loses its key, and the next
// campaigner leads.
//
// Leadership fences the leader's writes: Fence is the condition "my
// election key is still the one I created" (its create revision), which
// the store puts on every write transaction (store.EtcdOptions.Fence). A
// replica that lost its lease — even one that has not noticed yet, because
// it was paused — finds every write refused.
package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultTTL is the lease's time to live: how long a leader may go
// unheard of before a standby takes over.
const DefaultTTL = 10 * time.Second

// DefaultPrefix is the election's key prefix (under the store's).
const DefaultPrefix = "/kelpie/leader/"

// Options configure Campaign.
type Options struct {
	Prefix string        // DefaultPrefix if empty
	TTL    time.Duration // DefaultTTL if zero; whole seconds, at least 1
	// Value is what the leader publishes on its key: its addresses, for
	// Current to report.
	Value string
}

// Leader is leadership won.
type Leader struct {
	sess *concurrency.Session
	el   *concurrency.Election
}

// Campaign waits until this replica leads (or ctx ends) and returns its
// leadership.
func Campaign(ctx context.Context, cli *clientv3.Client, o Options) (*Leader, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	ttl := max(1, int(o.TTL.Round(time.Second)/time.Second))
	for {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
		if err != nil {
			return nil, fmt.Errorf("election: session: %w", err)
		}
		el := concurrency.NewElection(sess, o.Prefix)
		if err := el.Campaign(ctx, o.Value); err != nil {
			sess.Close()
			return nil, fmt.Errorf("election: campaign: %w", err)
		}
		// Campaign returns once every older key is gone, even when this
		// campaigner's own key went too: its lease expired while it
		// waited (keepalives starved on a loaded host). Such a win is
		// none — every write would be refused and Lost would close at
		// once — so campaign again, with a new lease.
		ok, err := holds(ctx, cli, el)
		if err != nil {
			sess.Close()
			return nil, fmt.Errorf("election: campaign: %w", err)
		}
		if ok {
			return &Leader{sess: sess, el: el}, nil
		}
		sess.Orphan() // its lease is gone already: nothing to revoke
		sess.Close()
	}
}

// holds says whether el's key still exists with the revision it
// campaigned with.
func holds(ctx context.Context, cli *clientv3.Client, el *concurrency.Election) (bool, error) {
	resp, err := cli.Get(ctx, el.Key())
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == el.Rev(), nil
}

// Fence is the condition that this replica still leads: its election key
// exists with the create revision it won with. A key deleted (the lease
// expired) or created again compares false.
func (l *Leader) Fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.el.Key()), "=", l.el.Rev())
}

// Lost is closed when the lease is gone: it expired unrenewed (the process
// was paused or cut off from etcd longer than the TTL) or was revoked.
func (l *Leader) Lost() <-chan struct{} { return l.sess.Done() }

// Key is the leader's election key; Rev its create revision.
func (l *Leader) Key() string { return l.el.Key() }

// Rev is the election key's create revision (the fencing token).
func (l *Leader) Rev() int64 { return l.el.Rev() }

// Resign gives up leadership at once (a standby takes over without
// waiting for the lease to expire) and ends the session.
func (l *Leader) Resign(ctx context.Context) error {
	err := l.el.Resign(ctx)
	return errors.Join(err, l.sess.Close())
}

// Current is the value the current leader published; false when no
// replica leads.
func Current(ctx context.Context, cli *clientv3.Client, prefix string) (string, bool, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return "", false, fmt.Errorf("election: leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}
