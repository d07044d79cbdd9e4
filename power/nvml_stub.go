//go:build !cgo || nonvml

package power

import "fmt"

// openNVML in a build without NVML: go-nvml needs cgo, and the nonvml tag
// leaves it out so that CGO_ENABLED=0 produces a fully static binary.
func openNVML(Options) (Source, error) {
	return nil, fmt.Errorf("power: nvml: %w: this binary was built with the nonvml tag or CGO_ENABLED=0; rebuild with cgo, or choose the triton or none energy source", ErrNotBuilt)
}
