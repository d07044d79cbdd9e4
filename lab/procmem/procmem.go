// Package procmem reads a process's memory from /proc (Linux), as the
// laboratory's memory measurements take it: its resident set (VmRSS)
// and the high-water mark of it (VmHWM), in KiB.
package procmem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// KiB reads field (VmRSS, VmHWM, ...) of /proc/PID/status, in KiB.
func KiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the process's memory: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
