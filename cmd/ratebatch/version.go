package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

func init() {
	register("version", "print the version and exit", runVersion)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	fmt.Fprintln(stdout, "ratebatch", v)
	return nil
}
