// Command testprogress turns `go test -json` into go test's own short
// output, printed as each package finishes rather than in package order, and
// says every 20 seconds which packages are still running. `make test` pipes
// `go test -race -json ./...` through it, so a slow package no longer leaves
// the screen blank for minutes. Passing tests stay quiet; a failing test's
// output is printed in full; every package's closing ok/FAIL line appears as
// go test writes it. The exit status is 1 when a package or a build failed.
// The last lines repeat each failed test with the end of its output, so a
// log read from its tail (a CI summary) still names what failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
	Elapsed    float64
}

type state struct {
	mu      sync.Mutex
	out     io.Writer
	running map[string]time.Time
	tests   map[string][]string // package/test -> buffered output
	failed  bool
	done    int
	recap   []string // failed tests, each with the end of its output
}

// recapLines is how much of a failed test's output the closing recap repeats.
const recapLines = 12

func main() {
	s := &state{out: os.Stdout, running: map[string]time.Time{}, tests: map[string][]string{}}
	stop := make(chan struct{})
	go s.report(stop, 20*time.Second)
	s.read(os.Stdin)
	close(stop)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		s.writeRecap()
		fmt.Fprintf(s.out, "testprogress: %d packages finished, some FAILED\n", s.done)
		os.Exit(1)
	}
	fmt.Fprintf(s.out, "testprogress: %d packages finished, all ok\n", s.done)
}

func (s *state) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			s.print(string(line) + "\n") // not an event: a build error, a panic before the test binary ran
			continue
		}
		s.handle(e)
	}
}

func (s *state) handle(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := e.Package + "\x00" + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.out, e.Output)
	case e.Action == "build-fail":
		s.failed = true
	case e.Test == "" && e.Action == "start":
		s.running[e.Package] = time.Now()
	case e.Test == "" && e.Action == "output":
		if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
			fmt.Fprint(s.out, e.Output)
		}
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		delete(s.running, e.Package)
		s.done++
		if e.Action == "fail" {
			s.failed = true
			s.unfinished(e.Package)
		}
	case e.Action == "output":
		s.tests[key] = append(s.tests[key], e.Output)
	case e.Action == "fail":
		lines := s.tests[key]
		for _, l := range lines {
			fmt.Fprint(s.out, l)
		}
		s.recap = append(s.recap, recapOf(e.Package, e.Test, lines))
		delete(s.tests, key)
	case e.Action == "pass" || e.Action == "skip":
		delete(s.tests, key)
	}
}

// unfinished prints the tests of a failed package that never ended: the
// ones running when its binary died (a panic, a timeout, os.Exit), whose
// output holds the reason and would otherwise be lost.
func (s *state) unfinished(pkg string) {
	var keys []string
	for key := range s.tests {
		if strings.HasPrefix(key, pkg+"\x00") {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		lines := s.tests[key]
		for _, l := range lines {
			fmt.Fprint(s.out, l)
		}
		test := strings.TrimPrefix(key, pkg+"\x00")
		s.recap = append(s.recap, recapOf(pkg, test+" (did not finish)", lines))
		delete(s.tests, key)
	}
}

// recapOf names a failed test and repeats the lines of its output that
// say why: from a panic's first line (what and where), else the last lines
// (a failure ends with its reason).
func recapOf(pkg, test string, lines []string) string {
	from := max(len(lines)-recapLines, 0)
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "panic: ") }); i >= 0 {
		from = i
	}
	lines = lines[from:min(from+recapLines, len(lines))]
	var b strings.Builder
	fmt.Fprintf(&b, "FAILED %s %s\n", strings.TrimPrefix(pkg, "github.com/ratebatch/ratebatch/"), test)
	for _, l := range lines {
		b.WriteString("  | " + l)
	}
	return b.String()
}

// writeRecap repeats the failed tests at the end of the log.
func (s *state) writeRecap() {
	if len(s.recap) == 0 {
		return
	}
	fmt.Fprintf(s.out, "testprogress: %d failed tests:\n", len(s.recap))
	for _, r := range s.recap {
		fmt.Fprint(s.out, r)
	}
}

func (s *state) print(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprint(s.out, text)
}

// report says which packages still run, every interval, while any does.
func (s *state) report(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.mu.Lock()
			var names []string
			for p, since := range s.running {
				names = append(names, fmt.Sprintf("%s (%.0fs)", strings.TrimPrefix(p, "github.com/ratebatch/ratebatch/"), time.Since(since).Seconds()))
			}
			slices.Sort(names)
			if len(names) > 0 {
				fmt.Fprintf(s.out, "... %d done, still running: %s\n", s.done, strings.Join(names, ", "))
			}
			s.mu.Unlock()
		}
	}
}
