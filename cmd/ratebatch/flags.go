package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Flag helpers the subcommands share.

// usagef prints "ratebatch NAME: message" and returns errUsage (exit 2).
func usagef(stderr io.Writer, name, format string, a ...any) error {
	fmt.Fprintf(stderr, "ratebatch "+name+": "+format+"\n", a...)
	return errUsage
}

func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func countSet(set map[string]bool, names ...string) int {
	n := 0
	for _, name := range names {
		if set[name] {
			n++
		}
	}
	return n
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, part := range splitList(s) {
		v, err := strconv.ParseFloat(part, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", part)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no value in %q", s)
	}
	return out, nil
}

func joinFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// errorf is fmt.Errorf, for messages that wrap nothing.
func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

// given is v when the flag name was set, else nil: an optional value.
func given[T any](set map[string]bool, name string, v *T) *T {
	if set[name] {
		return v
	}
	return nil
}
