package netns

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// subnetLock serialises the choice of a gateway cluster's subnet between
// processes (an flock: released when the holder dies).
const subnetLock = "/run/lock/kelpie-netns.lock"

func lockSubnets() (func(), error) {
	_ = os.MkdirAll("/run/lock", 0o755)
	f, err := os.OpenFile(subnetLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns: %v", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns: lock %s: %v", subnetLock, err)
	}
	return func() { f.Close() }, nil
}

// freeSubnet picks 10.N (N in 100..199, starting from a spot that depends
// on this process) that no route of this namespace uses.
func freeSubnet() (string, error) {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return "", fmt.Errorf("netns: ip route: %v", err)
	}
	routes := string(out)
	start := os.Getpid() % 100
	for i := range 100 {
		n := fmt.Sprintf("10.%d", 100+(start+i)%100)
		if !strings.Contains(routes, n+".") {
			return n, nil
		}
	}
	return "", fmt.Errorf("netns: no free 10.N.0.0/16 (N in 100..199) for a gateway")
}
