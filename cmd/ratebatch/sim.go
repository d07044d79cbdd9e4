package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ratebatch/ratebatch/lab/sim"
)

func init() {
	register("sim", "simulate batching policies on a model profile (discrete-event, virtual clock)", runSim)
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sim", stderr)
	f := sim.BindFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := flagsSet(fs)
	c, pols, err := f.Config(set, func(err error) { fmt.Fprintf(stderr, "ratebatch sim: skipping %v\n", err) })
	if err != nil {
		return usagef(stderr, "sim", "%v", err)
	}
	err = f.Run(ctx, c, pols, set, stdout)
	if fe := (*sim.FlagError)(nil); errors.As(err, &fe) {
		return usagef(stderr, "sim", "%v", fe)
	}
	return err
}
