package emulator

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling thread for d with the kernel's
// high-resolution timer (clock_nanosleep through nanosleep).
func preciseSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
