package loadreport

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ratebatch/ratebatch/lab/loadgen"
)

// RunSampled runs c while sampling the proxy's /status at admin every
// 500 ms, and writes the samples to samplesPath (none when empty) once the
// run has sent anything. The admin URL is checked before the run starts.
func RunSampled(ctx context.Context, c loadgen.Config, admin, samplesPath string) (loadgen.Result, error) {
	sampler := NewSampler(admin, c.Model)
	if _, err := sampler.Poll(ctx); err != nil {
		return loadgen.Result{}, fmt.Errorf("--admin: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	go sampler.Run(sctx, 500*time.Millisecond)
	res, err := loadgen.Run(ctx, c)
	cancel()
	if samplesPath == "" || res.Records == nil {
		return res, err
	}
	sampler.Poll(context.Background()) // the final figures
	if werr := writeSamplesFile(samplesPath, sampler.Samples()); werr != nil {
		return loadgen.Result{}, werr
	}
	return res, err
}

func writeSamplesFile(path string, samples []Sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteSamplesCSV(f, samples); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
