package server_test

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/server"
)

// TestSizeProcs checks who decides GOMAXPROCS in `ratebatch serve`: the
// procs option when it gives a count, the environment's GOMAXPROCS when set,
// and otherwise a Sizer that runs until the context ends and then gives the
// runtime its default back.
func TestSizeProcs(t *testing.T) {
	def := runtime.GOMAXPROCS(0)
	t.Cleanup(runtime.SetDefaultGOMAXPROCS)
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name      string
		procs     int
		env       string // "" unsets GOMAXPROCS
		wantProcs int
		sizing    bool
	}{
		{"a count fixes them", 3, "", 3, false},
		{"the environment's GOMAXPROCS fixes them", 0, "5", def, false},
		{"a count wins over the environment", 2, "5", 2, false},
		{"otherwise they follow the load", 0, "", def, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.SetDefaultGOMAXPROCS()
			t.Setenv("GOMAXPROCS", tt.env)
			if tt.env == "" {
				os.Unsetenv("GOMAXPROCS")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := server.SizeProcs(ctx, tt.procs, log)
			select {
			case <-done:
				if tt.sizing {
					t.Fatal("sizeProcs returned at once; want a Sizer running until the context ends")
				}
			case <-time.After(50 * time.Millisecond):
				if !tt.sizing {
					t.Fatal("sizeProcs started a Sizer; want the processors fixed")
				}
				cancel()
				<-done
			}
			if got := runtime.GOMAXPROCS(0); got != tt.wantProcs {
				t.Errorf("GOMAXPROCS = %d, want %d", got, tt.wantProcs)
			}
		})
	}
}
