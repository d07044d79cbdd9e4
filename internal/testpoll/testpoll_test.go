package testpoll

import (
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of stopping the test; Until returns after
// it as the real one would not, so the tests below only look at the record.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f) // t.Fatalf does not return either
}

// Until returns as soon as the condition holds: here on the third look.
func TestUntilReturnsWhenTheConditionHolds(t *testing.T) {
	var looks atomic.Int32
	Until(t, "the third look", func() bool { return looks.Add(1) >= 3 })
	if n := looks.Load(); n != 3 {
		t.Errorf("looked %d times, want 3", n)
	}
}

// Until fails the test, naming what it waited for, when the condition
// never holds.
func TestUntilFailsWhenTheConditionNeverHolds(t *testing.T) {
	f := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				panic(r)
			}
		}()
		until(f, "nothing", func() bool { return false }, 20*time.Millisecond)
	}()
	if f.failed == "" {
		t.Fatal("Until returned without failing the test")
	}
}

// Within fails past its own bound, however soon the condition would hold
// after it.
func TestWithinFailsPastItsBound(t *testing.T) {
	f := &fakeT{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if r := recover(); r != f {
				panic(r)
			}
		}()
		Within(f, "a second", 20*time.Millisecond, func() bool { return time.Since(start) > time.Second })
	}()
	if f.failed == "" || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("Within failed %q after %v, want a failure after 20 ms", f.failed, time.Since(start))
	}
}
