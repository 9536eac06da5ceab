//go:build race

package bench

// raceEnabled: allocation counts mean nothing under the race detector
// (sync.Pool drops a share of what is put back, at random).
const raceEnabled = true
