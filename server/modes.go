package server

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/registry"
	"github.com/ratebatch/ratebatch/ui"
)

// Modes reads cfg's upstream as serve would (its TLS included) and says
// what serve with cfg would do with each of its models: batched or
// passed through, and why (registry.Modes). `ratebatch models` prints it.
func Modes(ctx context.Context, cfg *config.Config, log *slog.Logger) ([]registry.Status, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	tc, err := upstreamTLS(cfg.UpstreamTLS, up.Scheme == "https", up.Hostname(), log)
	if err != nil {
		return nil, err
	}
	return registry.Modes(ctx, triton.NewClient(cfg.Upstream, httpClient(tc, 10*time.Second, cfg.UpstreamHeaderValues(os.LookupEnv))), cfg)
}

// modesOf lists the registry's models for the live page: each one's mode
// and why.
func modesOf(mr *registry.Models) func() []ui.Mode {
	return func() []ui.Mode {
		st := mr.Statuses()
		out := make([]ui.Mode, len(st))
		for i, s := range st {
			out[i] = ui.Mode{Model: s.Model, Mode: s.Mode, Reason: s.Reason}
		}
		return out
	}
}
