//go:build unix

package loadgen

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the test process has used. On
// a shared machine it measures a request's cost better than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
