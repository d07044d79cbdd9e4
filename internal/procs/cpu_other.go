//go:build !unix

package procs

import (
	"errors"
	"time"
)

// CPUTime is the CPU time this process has used; not available here.
func CPUTime() (time.Duration, error) {
	return 0, errors.New("the process's CPU time is not available on this platform")
}
