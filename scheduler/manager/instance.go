package manager

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// JobInstance is the instance of the job now named name: a UID fixed when
// it was submitted (derived from its name and submission time, both kept
// in the store, so a restarted scheduler knows it too). A job resubmitted
// under the same name is another instance: the node certificates and
// data-plane secret of the earlier one name its UID and are refused. ""
// when there is no such job.
func (m *Manager) JobInstance(name string) string {
	j, ok := m.lookup(name)
	if !ok {
		return ""
	}
	return j.instance()
}

// instance is the job's instance UID. It reads only the job's name and
// submission time, which never change once the job state exists: no lock.
func (j *jobState) instance() string {
	h := sha256.New()
	h.Write([]byte("kelpie job instance\x00" + j.spec.Name + "\x00"))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(j.submitted.UnixNano())))
	return hex.EncodeToString(h.Sum(nil)[:8])
}
