package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ratebatch/ratebatch/whatif"
)

func init() {
	register("whatif", "replay a running proxy's recent arrivals of a model through other settings (GET /whatif)", runWhatIf)
}

func runWhatIf(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("whatif", stderr)
	admin := fs.String("admin", "http://127.0.0.1:9002", "the proxy's admin URL (serve's --admin-listen)")
	model := fs.String("model", "", "the model (empty: the one model whose arrivals the proxy keeps)")
	minutes := fs.Float64("minutes", whatif.DefaultMinutes, "replay the arrivals of the last this many minutes")
	p99 := fs.Float64("p99-ms", 0, "recommend the most efficient setting whose p99 is within this (0: within the mean and p99 of the setting in force)")
	asJSON := fs.Bool("json", false, "print the proxy's JSON answer instead of the table")
	timeout := fs.Duration("timeout", whatif.DefaultTimeout, "give up after this long (a long window takes minutes at the proxy's share of a core)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !(*minutes > 0) || *p99 < 0 {
		return usagef(stderr, "whatif", "--minutes must be > 0 and --p99-ms >= 0")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	progress := func(p whatif.Progress) {
		fmt.Fprintf(stderr, "replaying %s: %d of %d settings, %.0f s\n", p.Model, p.Replayed, p.Settings, p.Seconds)
	}
	rep, raw, err := whatif.Ask(ctx, &http.Client{Timeout: time.Minute}, *admin, *model, *minutes, *p99, progress)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := stdout.Write(raw)
		return err
	}
	whatif.WriteTable(stdout, rep)
	return nil
}
