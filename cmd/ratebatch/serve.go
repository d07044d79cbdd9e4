package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/server"
)

func init() {
	register("serve", "run the batching proxy in front of Triton", runServe)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	cfgFile := fs.String("config", "", "YAML configuration file (flags and RATEBATCH_* env override it)")
	config.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ratebatch serve --upstream URL [--listen ADDR] [--admin-listen ADDR] [flags]")
		fmt.Fprintln(fs.Output(), "\nServes Triton's HTTP API on --listen, batching inference requests of every")
		fmt.Fprintln(fs.Output(), "model with max_batch_size > 0 and passing everything else through.")
		fmt.Fprintln(fs.Output(), "Precedence: defaults < --config file < RATEBATCH_* environment < flags.")
		fmt.Fprintln(fs.Output(), "SIGHUP reads them again and applies what can change live (docs/CONFIG.md, \"Reload\").")
		fmt.Fprintln(fs.Output(), "Every option is documented in docs/CONFIG.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	src := config.Source{File: *cfgFile, LookupEnv: os.LookupEnv, Flags: fs}
	cfg, err := config.Load(src)
	if err != nil {
		return err
	}
	log := server.NewLogger(cfg.Log, stderr)
	ctx, stop := context.WithCancel(ctx)
	sized := server.SizeProcs(ctx, cfg.Procs, log)
	defer func() { stop(); <-sized }()
	s, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	s.ReloadFrom(src) // on SIGHUP
	s.LimitRuntime()
	return s.Run(ctx)
}
