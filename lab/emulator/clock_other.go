//go:build !linux

package emulator

import "time"

// preciseSleep is the runtime's sleep where nanosleep is not wired.
func preciseSleep(d time.Duration) { time.Sleep(d) }
