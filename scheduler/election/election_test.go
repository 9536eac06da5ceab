package election

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kelpie/kelpie/scheduler/store"
	"github.com/kelpie/kelpie/scheduler/store/etcdtest"
)

// TestFencedWriteRefused: a leader whose lease expired while it was not
// renewing it (a paused process: its keepalives stop, nothing is revoked)
// writes nothing once another replica leads: its write is refused with
// store.ErrFenced and is not in the store, while the new leader's writes
// go through.
func TestFencedWriteRefused(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cliA, cliB := c.Client(t), c.Client(t)

	a, err := Campaign(ctx, cliA, Options{TTL: time.Second, Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	stA, err := store.OpenEtcd(cliA, store.EtcdOptions{Fence: a.Fence})
	if err != nil {
		t.Fatal(err)
	}
	if err := stA.PutJob(store.JobRecord{Name: "j", State: "running"}); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	if v, ok, err := Current(ctx, cliB, ""); err != nil || !ok || v != "a" {
		t.Fatalf("Current = %q, %v, %v; want a", v, ok, err)
	}

	// A stops renewing its lease, as a SIGSTOPped process does; B
	// campaigns and leads once A's lease has expired.
	a.sess.Orphan()
	b, err := Campaign(ctx, cliB, Options{TTL: time.Second, Value: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(context.Background())
	select {
	case <-a.Lost():
	case <-ctx.Done():
		t.Fatal("the old leader's Lost never closed")
	}

	err = stA.PutJob(store.JobRecord{Name: "j", State: "stale-write"})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the old leader's write after losing its lease = %v; want ErrFenced", err)
	}
	t.Logf("refused: %v", err)
	stB, err := store.OpenEtcd(cliB, store.EtcdOptions{Fence: b.Fence})
	if err != nil {
		t.Fatal(err)
	}
	j, ok, err := stB.GetJob("j")
	if err != nil || !ok || j.State != "running" {
		t.Fatalf("job after the refused write = %+v, %v, %v; want state running", j, ok, err)
	}
	if err := stB.PutJob(store.JobRecord{Name: "j", State: "completed"}); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	if v, _, _ := Current(ctx, cliA, ""); v != "b" {
		t.Errorf("Current after the takeover = %q; want b", v)
	}
}

// TestLeaseLostWhileWaiting: a standby whose own lease expires while it
// waits to lead (its key is gone; here the lease is revoked, as etcd
// does when its keepalives are starved) does not come out of Campaign
// "leading" with no key — every write refused, Lost closed at once — when
// the leader goes: it campaigns again and leads with a key that holds.
func TestLeaseLostWhileWaiting(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cliA, cliB, cli := c.Client(t), c.Client(t), c.Client(t)
	a, err := Campaign(ctx, cliA, Options{TTL: 10 * time.Second, Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	type won struct {
		l   *Leader
		err error
	}
	bWon := make(chan won, 1)
	go func() {
		l, err := Campaign(ctx, cliB, Options{TTL: 10 * time.Second, Value: "b"})
		bWon <- won{l, err}
	}()
	// B's key, once it waits behind A's; then its lease goes.
	var bLease clientv3.LeaseID
	for bLease == 0 {
		resp, err := cli.Get(ctx, DefaultPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 2 {
			bLease = clientv3.LeaseID(resp.Kvs[1].Lease)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := cli.Revoke(ctx, bLease); err != nil {
		t.Fatal(err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-bWon
	if w.err != nil {
		t.Fatal(w.err)
	}
	b := w.l
	defer b.Resign(context.Background())
	select {
	case <-b.Lost():
		t.Fatal("b came out of Campaign with its lease already lost")
	default:
	}
	resp, err := cli.Txn(ctx).If(b.Fence()).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded {
		t.Fatal("b leads by Campaign but its fence fails: its key is gone")
	}
	if v, _, _ := Current(ctx, cli, ""); v != "b" {
		t.Errorf("Current = %q; want b", v)
	}
}
