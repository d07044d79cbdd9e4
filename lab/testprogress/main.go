// Command testprogress turns `go test -json` into go test's own short
// output, printed as each package finishes rather than in package order, and
// says every 20 seconds which packages are still running. `make test` pipes
// `go test -race -json ./...` through it, so a slow package no longer leaves
// the screen blank for minutes. Passing tests stay quiet; a failing test's
// output is printed in full; every package's closing ok/FAIL line appears as
// go test writes it. The exit status is 1 when a package or a build failed.
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
}

func main() {
	s := &state{out: os.Stdout, running: map[string]time.Time{}, tests: map[string][]string{}}
	stop := make(chan struct{})
	go s.report(stop, 20*time.Second)
	s.read(os.Stdin)
	close(stop)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
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
		}
	case e.Action == "output":
		s.tests[key] = append(s.tests[key], e.Output)
	case e.Action == "fail":
		for _, l := range s.tests[key] {
			fmt.Fprint(s.out, l)
		}
		delete(s.tests, key)
	case e.Action == "pass" || e.Action == "skip":
		delete(s.tests, key)
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
