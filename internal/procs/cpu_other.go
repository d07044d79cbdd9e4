//go:build !unix

package procs

import (
	"errors"
	"time"
)

func processCPU() (time.Duration, error) {
	return 0, errors.New("the process's CPU time is not available on this platform")
}
