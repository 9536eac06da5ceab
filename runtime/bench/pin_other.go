//go:build !linux

package bench

import "errors"

func pinProcess(int) (func(), error) {
	return nil, errors.New("bench: cpu pinning is only implemented on linux")
}

func canPin() bool { return false }
