package registry

import (
	"context"
	"fmt"
	"sort"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/triton"
)

// A model's mode: what the proxy does with its inference calls.
const (
	// ModeBatched: its calls queue and are merged into batches.
	ModeBatched = "batched"
	// ModePassthrough: its calls go to Triton as they came, and Triton's
	// answers back as they came.
	ModePassthrough = "passed through"
	// ModeNotServed: the upstream does not serve it now (not loaded, or
	// its configuration unreadable); its calls are passed through, and
	// Triton answers them.
	ModeNotServed = "not served"
)

// decide is the one rule for a model's mode: the proxy batches a model
// whose configuration mc Triton batches by concatenating its requests'
// rows (kserve.ModelConfig.Batchable), whose response cache is off or
// which the configuration batches anyway (models.NAME.batch_cached), and
// whose policy is not passthrough. reason says why not.
func decide(name string, mc *triton.ModelConfig, cfg *config.Config) (batched bool, reason string) {
	if ok, why := mc.Batchable(); !ok {
		return false, why
	}
	if mc.ResponseCached() && !cfg.Models[name].BatchCached {
		return false, "response cache: a merged request has its own cache key, so the callers' repeated requests would miss Triton's cache (models." +
			name + ".batch_cached batches it anyway)"
	}
	if cfg.ModelPolicy(name) == config.Passthrough {
		return false, "policy passthrough (configured)"
	}
	return true, ""
}

// Reader is the part of the upstream's management API that decides the
// models' modes: the repository index and each model's configuration.
type Reader interface {
	RepositoryIndex(ctx context.Context) ([]triton.IndexEntry, error)
	ModelConfig(ctx context.Context, model string) (*triton.ModelConfig, error)
}

// Modes reads the upstream's repository index and each model's
// configuration and says what `serve` with cfg would do with each model,
// and why, without starting anything: `ratebatch models` shows it before
// a user switches clients to the proxy. A model the index lists but
// whose configuration cannot be read is ModeNotServed, with the error.
func Modes(ctx context.Context, up Reader, cfg *config.Config) ([]Status, error) {
	idx, err := up.RepositoryIndex(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	out := make([]Status, 0, len(idx))
	seen := map[string]bool{}
	for _, ix := range idx {
		if seen[ix.Name] { // one row per version: the model's state is its first
			continue
		}
		seen[ix.Name] = true
		s := Status{Model: ix.Name, Mode: ModeNotServed}
		if ix.State != "" && ix.State != "READY" {
			s.Reason = "the upstream lists it as " + ix.State
			if ix.Reason != "" {
				s.Reason += " (" + ix.Reason + ")"
			}
			out = append(out, s)
			continue
		}
		mc, err := up.ModelConfig(ctx, ix.Name)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			s.Reason = "configuration unreadable: " + err.Error()
		default:
			s.Batched, s.Reason = decide(ix.Name, mc, cfg)
			s.Mode = modeOf(s.Batched)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out, nil
}

func modeOf(batched bool) string {
	if batched {
		return ModeBatched
	}
	return ModePassthrough
}
