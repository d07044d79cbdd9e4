package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/registry"
	"github.com/ratebatch/ratebatch/server"
)

func init() {
	register("models", "list the upstream's models and what serve would do with each: batch it or pass it through, and why", runModels)
}

// runModels takes serve's configuration (its flags, file and environment)
// so that what it prints is what serve with the same configuration does.
func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("models", stderr)
	cfgFile := fs.String("config", "", "serve's YAML configuration file: its models: section (policy passthrough, batch_cached) applies as in serve")
	asJSON := fs.Bool("json", false, "print a JSON array: model, mode, batched, reason")
	config.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ratebatch models --upstream URL [--config FILE] [--json]")
		fmt.Fprintln(fs.Output(), "\nReads the upstream's repository index and each model's configuration and")
		fmt.Fprintln(fs.Output(), "says what `ratebatch serve` with the same configuration would do with each")
		fmt.Fprintln(fs.Output(), "model's inference calls: batch them, or pass them through to Triton as they")
		fmt.Fprintln(fs.Output(), "came, and why (docs/DROPIN.md). It takes serve's flags, file and RATEBATCH_*")
		fmt.Fprintln(fs.Output(), "environment; only the upstream and the models: section matter here.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(config.Source{File: *cfgFile, LookupEnv: os.LookupEnv, Flags: fs})
	if err != nil {
		return err
	}
	modes, err := server.Modes(ctx, cfg, nil)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(modes)
	}
	writeModes(stdout, modes)
	return nil
}

// writeModes prints one line per model: its name, its mode and why.
func writeModes(w io.Writer, modes []registry.Status) {
	if len(modes) == 0 {
		fmt.Fprintln(w, "the upstream's repository index lists no model (a PyTriton server lists none: serve looks each model up at its first request)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tMODE\tWHY")
	for _, m := range modes {
		why := m.Reason
		if why == "" {
			why = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Model, m.Mode, why)
	}
	tw.Flush()
}
