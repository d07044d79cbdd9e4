package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
)

func commandNames() []string {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TestUnknownFlagIsShort: a mistyped flag prints the error and one line
// pointing at -h, so the error does not scroll away under the help.
func TestUnknownFlagIsShort(t *testing.T) {
	for _, name := range commandNames() {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), []string{name, "--no-such-flag"}, &out, &errb); code != 2 {
				t.Fatalf("exit code %d, want 2", code)
			}
			lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], "no-such-flag") || lines[1] != "Run 'ratebatch "+name+" -h' for its flags." {
				t.Fatalf("stderr = %q, want the error and one line pointing at -h", errb.String())
			}
		})
	}
}

// TestHelpDescribesAndReadsWell: every command's -h starts with its usage
// line and a description, and no flag line is garbled by the flag package's
// back-quote rule (a `quoted` word in a help text becomes the flag's
// argument name: "-samples-csv ratebatch report").
func TestHelpDescribesAndReadsWell(t *testing.T) {
	flagLine := regexp.MustCompile(`^  -(\S+)(?: (.*))?$`)
	for _, name := range commandNames() {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), []string{name, "-h"}, &out, &errb); code != 0 {
				t.Fatalf("exit code %d", code)
			}
			help := errb.String()
			lines := strings.Split(help, "\n")
			if !strings.HasPrefix(lines[0], "usage: ratebatch "+name) {
				t.Errorf("help starts %q, want a usage line", lines[0])
			}
			// After the usage line(s) and a blank line comes a description,
			// not straight away the flags.
			i := 1
			for i < len(lines) && (strings.HasPrefix(strings.TrimSpace(lines[i]), "ratebatch ") || strings.TrimSpace(lines[i]) == "") {
				i++
			}
			if i == len(lines) || strings.HasPrefix(lines[i], "Flags") || strings.HasPrefix(lines[i], "  -") {
				t.Errorf("help has no description after the usage line:\n%s", help)
			}
			if strings.Contains(help, "Usage of") {
				t.Errorf("bare flag-package header in help:\n%s", help)
			}
			for _, l := range lines {
				m := flagLine.FindStringSubmatch(l)
				if m == nil || m[2] == "" {
					continue
				}
				if strings.Contains(m[2], " ") {
					t.Errorf("flag line %q: argument name %q has spaces (a back-quoted phrase in the help text)", l, m[2])
				}
			}
		})
	}
}

func TestUnknownCommandSuggests(t *testing.T) {
	tests := []struct{ typed, want string }{
		{"serv", "serve"}, {"sevre", "serve"}, {"reprot", "report"}, {"emu", "emulate"}, {"versoin", "version"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{tt.typed}, &out, &errb); code != 2 {
			t.Fatalf("%s: exit %d", tt.typed, code)
		}
		if want := `did you mean "` + tt.want + `"?`; !strings.Contains(errb.String(), want) {
			t.Errorf("%s: stderr %q, want %s", tt.typed, errb.String(), want)
		}
		if n := strings.Count(strings.TrimSpace(errb.String()), "\n"); n > 1 {
			t.Errorf("%s: %d lines; want the error and one hint, not the command list", tt.typed, n+1)
		}
	}
	var out, errb bytes.Buffer
	run(context.Background(), []string{"xyzzy"}, &out, &errb)
	if strings.Contains(errb.String(), "did you mean") {
		t.Errorf("a suggestion for a name like no command: %q", errb.String())
	}
}

func TestVersionPrintsBuild(t *testing.T) {
	var b bytes.Buffer
	writeVersion(&b, &debug.BuildInfo{
		GoVersion: "go1.26.1",
		Main:      debug.Module{Path: "github.com/ratebatch/ratebatch", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-23T20:00:00Z"}, {Key: "vcs.modified", Value: "true"},
		},
	})
	for _, want := range []string{"ratebatch v1.2.3", "github.com/ratebatch/ratebatch", "0123abcd (with local changes)", "2026-11-23T20:00:00Z", "go1.26.1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, b.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), runtime.Version()) || !strings.Contains(out.String(), "revision") {
		t.Errorf("ratebatch version = %q, want the Go version and the revision line", out.String())
	}
}

// TestCompareDefaultsStayOutOfDocs: compare run without --out writes under
// out/, never into a docs/ directory of wherever it runs.
func TestCompareDefaultsStayOutOfDocs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var out, errb bytes.Buffer
	args := []string{"compare", "--presets", "googlenet-p4", "--rhos", "0.3", "--requests", "300", "--policies", "adhoc", "--trace", "none", "--trace-peak-rho", "0", "--quiet"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "docs")); err == nil {
		t.Error("compare created docs/ in the working directory")
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "compare", "RESULTS.md")); err != nil {
		t.Errorf("no out/compare/RESULTS.md: %v (stdout %q)", err, out.String())
	}
}
