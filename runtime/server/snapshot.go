package server

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/blocks"
	"github.com/kelpie/kelpie/runtime/syncmodel"
)

// SaveSnapshot writes the server's blocks, their optimizer state and its
// V_train to path, atomically (a temporary file renamed over the old one).
// Gradients summed for an unfinished version are not in it.
func (s *Server) SaveSnapshot(path string) error {
	s.mu.Lock()
	snap := &kelpiepb.ServerSnapshot{VTrain: s.engine.VTrain(), AssignmentVersion: s.version, UnixNano: time.Now().UnixNano()}
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

// LoadSnapshot reads a snapshot written by SaveSnapshot.
func LoadSnapshot(path string) (*kelpiepb.ServerSnapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	snap := &kelpiepb.ServerSnapshot{}
	if err := proto.Unmarshal(b, snap); err != nil {
		return nil, fmt.Errorf("snapshot %s: %v", path, err)
	}
	return snap, nil
}

// Restore installs a snapshot: the blocks it holds (which the table t must
// assign to this server) and a barrier that counts from its V_train. The
// workers resume there; what the blocks learnt after the snapshot is lost.
func (s *Server) Restore(t blocks.Table, me int, snap *kelpiepb.ServerSnapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range snap.Blocks {
		id := int(m.Block)
		if id >= len(t.Blocks) || t.ServerOf[id] != me {
			return fmt.Errorf("server %s: snapshot block %d is not this server's under table v%d", s.cfg.Name, id, t.Version)
		}
		blk, err := s.blockFrom(t.Blocks[id], m)
		if err != nil {
			return err
		}
		s.blocks[id] = blk
	}
	s.version = t.Version
	s.el.table, s.el.me = t, me
	s.engine = syncmodel.NewAt(s.cfg.Sync, s.engine.Members(), snap.VTrain)
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	return nil
}
