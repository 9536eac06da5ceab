package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
)

// SaveSnapshot writes the server's blocks, their optimizer state and its
// V_train to path, atomically (a temporary file renamed over the old one).
// Gradients summed for an unfinished version are not in it.
func (s *Server) SaveSnapshot(path string) error {
	s.mu.Lock()
	s.awaitQuiet()
	snap := &pspb.ServerSnapshot{VTrain: s.engine.VTrain(), AssignmentVersion: s.version, UnixNano: time.Now().UnixNano()}
	ids := make([]int, 0, len(s.blocks))
	for id := range s.blocks {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		snap.Blocks = append(snap.Blocks, s.blockMessage(id))
	}
	s.mu.Unlock()
	b, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SnapshotPath is where the server's snapshot goes ("" for none).
func (s *Server) SnapshotPath() string { return s.cfg.SnapshotPath }

// Checkpoint saves the snapshot now, to the configured path.
func (s *Server) Checkpoint(ctx context.Context, _ *pspb.StatsRequest) (*pspb.ServerStats, error) {
	if s.cfg.SnapshotPath == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "server %s has no snapshot path", s.cfg.Name)
	}
	if err := s.SaveSnapshot(s.cfg.SnapshotPath); err != nil {
		return nil, status.Errorf(codes.Internal, "server %s: checkpoint: %v", s.cfg.Name, err)
	}
	return s.Stats(ctx, &pspb.StatsRequest{})
}

// LoadSnapshots reads every snapshot in dir and merges their blocks (a
// relaunched job whose servers changed finds each block in the snapshot of
// the server that held it); V_train is the lowest of them.
func LoadSnapshots(dir string) (*pspb.ServerSnapshot, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.snap"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no snapshots in %s", dir)
	}
	out := &pspb.ServerSnapshot{VTrain: -1}
	newest := map[uint32]*pspb.MigrateRequest{} // a block in several snapshots: the latest copy
	for _, p := range paths {
		snap, err := LoadSnapshot(p)
		if err != nil {
			return nil, err
		}
		if out.VTrain < 0 || snap.VTrain < out.VTrain {
			out.VTrain = snap.VTrain
		}
		for _, b := range snap.Blocks {
			if old, ok := newest[b.Block]; !ok || b.VTrain > old.VTrain {
				newest[b.Block] = b
			}
		}
		out.UnixNano = max(out.UnixNano, snap.UnixNano)
	}
	ids := make([]int, 0, len(newest))
	for id := range newest {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for _, id := range ids {
		out.Blocks = append(out.Blocks, newest[uint32(id)])
	}
	return out, nil
}

// LoadSnapshot reads a snapshot written by SaveSnapshot.
func LoadSnapshot(path string) (*pspb.ServerSnapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	snap := &pspb.ServerSnapshot{}
	if err := proto.Unmarshal(b, snap); err != nil {
		return nil, fmt.Errorf("snapshot %s: %v", path, err)
	}
	return snap, nil
}

// Restore installs a snapshot: the blocks it holds that the table t assigns
// to this server (every one of them must be there) and a barrier that counts
// from its V_train. The workers resume there; what the blocks learnt after
// the snapshot is lost.
func (s *Server) Restore(t blocks.Table, me int, snap *pspb.ServerSnapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaitQuiet()
	// The barrier restarts at the version of the blocks restored here (all
	// from one snapshot when one server restarts; from a consistent
	// checkpoint when the whole job was relaunched).
	vtrain := int64(-1)
	for _, m := range snap.Blocks {
		id := int(m.Block)
		if id >= len(t.Blocks) || t.ServerOf[id] != me {
			continue // another server's block
		}
		if vtrain < 0 || m.VTrain < vtrain {
			vtrain = m.VTrain
		}
		blk, err := s.blockFrom(t.Blocks[id], m)
		if err != nil {
			return err
		}
		s.blocks[id] = blk
	}
	for _, id := range t.OnServer(me) {
		if s.blocks[id] == nil {
			return fmt.Errorf("server %s: block %d is in no snapshot", s.cfg.Name, id)
		}
	}
	s.version = t.Version
	s.el.table, s.el.me = t, me
	s.engine = syncmodel.NewAt(s.cfg.Sync, s.engine.Members(), max(vtrain, 0))
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	return nil
}
