//go:build !cgo || nonvml

package power

import "fmt"

// A build without NVML has no nvml source: go-nvml needs cgo, and the
// nonvml tag leaves it out so that CGO_ENABLED=0 produces a fully static
// binary. Configuring it says so.
func init() {
	RegisterKind(Kind{Name: KindNVML, About: nvmlAbout,
		Missing: fmt.Errorf("power: nvml: %w: this binary was built with the nonvml tag or CGO_ENABLED=0; rebuild with cgo, or choose the triton or none energy source", ErrNotBuilt)})
}
