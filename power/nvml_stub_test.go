//go:build !cgo || nonvml

package power

import (
	"errors"
	"strings"
	"testing"
)

func TestNVMLNotBuilt(t *testing.T) {
	_, err := Open(KindNVML, Options{})
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Open(nvml) in a nonvml build: %v; want an error wrapping ErrNotBuilt", err)
	}
	if !strings.Contains(err.Error(), "triton or none") {
		t.Errorf("error %q does not say what to do instead", err)
	}
}
