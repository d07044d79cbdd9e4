//go:build !unix

package loadgen

import "time"

// processCPU is not measured here; benchmarks then report 0 CPU per request.
func processCPU() time.Duration { return 0 }
