package procmem

import (
	"os"
	"testing"
)

// The test's own process has a resident set, and its high-water mark is
// at least it; a process that does not exist is an error.
func TestKiB(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	rss, err := KiB(os.Getpid(), "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS %d, %v", rss, err)
	}
	if hwm, err := KiB(os.Getpid(), "VmHWM"); err != nil || hwm < rss {
		t.Fatalf("VmHWM %d, %v; VmRSS %d", hwm, err, rss)
	}
	if _, err := KiB(os.Getpid(), "NoSuchField"); err == nil {
		t.Fatal("a field that is not there read")
	}
	if _, err := KiB(-1, "VmRSS"); err == nil {
		t.Fatal("a process that does not exist read")
	}
}
