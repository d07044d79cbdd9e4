// Command ratebatch is an adaptive batching proxy for NVIDIA Triton Inference
// Server, with the simulator, emulator and tools that let anyone measure it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/ratebatch/ratebatch/internal/suggest"
)

// command is one subcommand. Each lives in its own file and registers itself
// in init, so adding a subcommand never touches this file.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	if _, dup := commands[name]; dup {
		panic("ratebatch: subcommand registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

// errUsage marks a usage error: exit code 2, message already printed.
var errUsage = errors.New("usage error")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	name := "demo" // the embedded default
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch name {
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "ratebatch: unknown command %q", name)
		if near := suggest.Closest(name, slices.Collect(maps.Keys(commands))); near != "" {
			fmt.Fprintf(stderr, "; did you mean %q?", near)
		}
		fmt.Fprintln(stderr, "\nRun 'ratebatch -h' for the list of commands.")
		return 2
	}
	err := cmd.run(ctx, args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "ratebatch %s: %v\n", name, err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ratebatch <command> [flags]   (no command runs the demo)")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'ratebatch <command> -h' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting, so
// that commands stay testable. Its -h text starts with the command's usage
// line and summary; a command with more to say sets its own fs.Usage.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ratebatch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ratebatch %s [flags]\n\n", name)
		if c, ok := commands[name]; ok {
			fmt.Fprintf(fs.Output(), "%s.\n\n", upperFirst(c.summary))
		}
		fmt.Fprintln(fs.Output(), "Flags:")
		fs.PrintDefaults()
	}
	return fs
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// parseFlags parses args and maps flag errors to errUsage. A mistake prints
// the error and one line pointing at -h, not the whole help, so the error
// stays on screen; -h prints the help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	help, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard) // the error is printed below, with a suggestion
	err := fs.Parse(args)
	fs.Usage = help
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return err
		}
		fmt.Fprint(out, err)
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			var names []string
			fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			if near := suggest.Closest(strings.TrimLeft(name, "-"), names); near != "" {
				fmt.Fprintf(out, "; did you mean --%s?", near)
			}
		}
		fmt.Fprintf(out, "\nRun '%s -h' for its flags.\n", fs.Name())
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}
