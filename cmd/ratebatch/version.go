package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register("version", "print the module version, VCS revision and Go version, and exit", runVersion)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	writeVersion(stdout, bi)
	return nil
}

// writeVersion prints what a bug report needs from the build: the module
// version ("(devel)" for a build from a checkout), the VCS revision and time
// and whether the tree had local changes (go build records them in a git
// checkout), and the Go toolchain. bi may be nil (a binary without build
// information); the Go version is then the running one.
func writeVersion(w io.Writer, bi *debug.BuildInfo) {
	version, module, goVersion := "(unknown)", "github.com/ratebatch/ratebatch", runtime.Version()
	settings := map[string]string{}
	if bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.Main.Path != "" {
			module = bi.Main.Path
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	fmt.Fprintf(w, "ratebatch %s\n", version)
	fmt.Fprintf(w, "  module    %s\n", module)
	rev := settings["vcs.revision"]
	if rev == "" {
		rev = "unknown (built without VCS information)"
	} else if settings["vcs.modified"] == "true" {
		rev += " (with local changes)"
	}
	fmt.Fprintf(w, "  revision  %s\n", rev)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(w, "  committed %s\n", t)
	}
	fmt.Fprintf(w, "  go        %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
}
