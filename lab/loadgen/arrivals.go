package loadgen

import (
	"errors"
	"fmt"

	"github.com/ratebatch/ratebatch/lab/trace"
)

// Arrivals are a run's arrivals as the load command names them: a
// constant Poisson rate (which needs Config.Duration given) or a trace (a
// built-in name or a CSV file, trace.Load), the trace optionally scaled
// and played faster. A nil field, or an empty Trace, was not given.
type Arrivals struct {
	Rate           *float64
	Trace          string
	Scale, Speedup *float64
	// DurationGiven says Config.Duration was set; a trace's length is the
	// default.
	DurationGiven bool
}

// Apply sets c.Rate (and a trace's c.Duration) and describes the load for
// a summary. Its errors name the flags.
func (a Arrivals) Apply(c *Config) (string, error) {
	if a.Trace == "" && (a.Scale != nil || a.Speedup != nil) {
		return "", errors.New("--trace-scale and --speedup need --trace")
	}
	switch {
	case a.Rate == nil && a.Trace == "":
		return "", errors.New("give the arrivals: --rate RPS or --trace NAME")
	case a.Rate != nil && a.Trace != "":
		return "", errors.New("give only one of --rate and --trace")
	case a.Rate != nil:
		if r := *a.Rate; !(r > 0) || r > 1e7 {
			return "", fmt.Errorf("--rate must be > 0 and at most 1e7 requests/s, got %v", r)
		}
		if !a.DurationGiven {
			return "", errors.New("give --duration with --rate, e.g. --duration 30s")
		}
		c.Rate = ConstantRate(*a.Rate)
		return fmt.Sprintf("Poisson %g req/s", *a.Rate), nil
	}
	tr, err := trace.Load(a.Trace)
	if err != nil {
		return "", fmt.Errorf("--trace: %w", err)
	}
	if tr, err = tr.Scale(orOne(a.Scale)); err != nil {
		return "", fmt.Errorf("--trace-scale: %w", err)
	}
	if tr, err = tr.Compress(orOne(a.Speedup)); err != nil {
		return "", fmt.Errorf("--speedup: %w", err)
	}
	if tr.MaxRate() <= 0 {
		return "", fmt.Errorf("--trace %s has no arrivals (its rate is 0 throughout)", a.Trace)
	}
	if !a.DurationGiven {
		c.Duration = tr.Duration()
	}
	c.Rate = tr
	return fmt.Sprintf("trace %s (mean %.1f req/s, peak %.6g req/s)", tr.Name(), tr.MeanRate(), tr.MaxRate()), nil
}

func orOne(v *float64) float64 {
	if v == nil {
		return 1
	}
	return *v
}

// Command completes and checks c as the load command's flags give it,
// where a zero is a value given, not the default Run would choose: the
// protocol (http or grpc), what to do when the pool is full (drop or
// wait), and every bound. Its errors name the flags.
func Command(c *Config, protocol, onFull string, durationGiven bool) error {
	c.GRPC = protocol == "grpc"
	switch {
	case c.Target == "":
		return errors.New("give the server: --target URL")
	case c.Model == "":
		return errors.New("give the model: --model NAME")
	case protocol != "http" && protocol != "grpc":
		return fmt.Errorf("--protocol must be http or grpc, got %q", protocol)
	case c.GRPC && c.Binary:
		return errors.New("--binary is an HTTP form; gRPC always sends tensors as raw bytes")
	case c.Rows < 1:
		return fmt.Errorf("--rows must be >= 1, got %d", c.Rows)
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout must be > 0, got %v", c.Timeout)
	case c.MaxInFlight < 1:
		return fmt.Errorf("--max-inflight must be >= 1, got %d", c.MaxInFlight)
	case c.Payloads < 0:
		return fmt.Errorf("--payloads must be >= 0, got %d", c.Payloads)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup must be >= 0, got %v", c.Warmup)
	case durationGiven && c.Duration <= 0:
		return fmt.Errorf("--duration must be > 0, got %v", c.Duration)
	}
	switch onFull {
	case "drop":
		c.OnFull = DropWhenFull
	case "wait":
		c.OnFull = WaitWhenFull
	default:
		return fmt.Errorf("--on-full must be drop or wait, got %q", onFull)
	}
	return nil
}
