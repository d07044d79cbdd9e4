package docs_test

// The documents' shell commands, run as written (issue 36: a newcomer met
// a curl without its request.json, a PUT /policy without a token and on a
// model the emulator lacks, a perf_analyzer that could not load).
//
// The convention, for README.md, docs/*.md and docs/results/*.md (except
// the documents in notRunDocuments): every code block fenced as sh, bash,
// shell or console is preceded by one marker line (blank lines between
// are allowed):
//
//	<!-- run -->                 run to completion; it must exit 0
//	<!-- run: server -->         one command that keeps serving (the
//	                             emulator, the proxy): started in the
//	                             background, ready once the ports of its
//	                             --*listen flags accept (and the proxy's
//	                             /readyz answers), stopped at the end
//	<!-- run: perf_analyzer -->  as run, when .venv (or $RATEBATCH_VENV) has
//	                             perf_analyzer; otherwise logged as not run
//	<!-- run: long -->           as run, when RATEBATCH_LONG is set (make
//	                             test-long, CI); a block of more than a few
//	                             seconds, so that go test ./docs stays quick
//	<!-- not run: REASON -->     not run, for the reason given (a real
//	                             Triton or GPU, minutes of runtime, ...)
//
// A block fenced without a language is a shell block too when a marker
// precedes it, and must have one when its first line is a command. Blocks
// between a "<!-- ...: BEGIN generated -->" line and its "END generated"
// line are a tool's output (tests/triton/bench.py writes one: the commands
// it ran), not instructions, and are left alone; the page gives the
// command that regenerates them outside the markers.
//
// The blocks run in document order (README.md first, then docs/*.md and
// docs/results/*.md by name), in one scratch directory that looks like a fresh clone after the
// two commands: every file of the repository (symlinked) and bin/ratebatch
// freshly built. Each block is one `bash -euo pipefail` script, so every
// command in it must succeed, not only the last; files a block writes
// (request.json) stay for the next. Triton's and ratebatch's usual ports in
// the text (8000, 8001, 8002, 9000, 9001, 9002, 9443, 9444 after a colon) are replaced
// by free loopback ports, so the run neither meets a Triton on this machine
// nor another run. A `go test` command that is not run is still checked
// as `go test -list` would (from the sources: listTests): its packages
// exist and its -run (or -bench, -fuzz) pattern names at least one test
// there.
//
// TestDocsCommandsAreMarked (always) checks the markers;
// TestDocsCommandsRun (skipped with -short) runs the blocks.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// notRunDocuments are left out of the convention, with the reason (none
// today: the results pages mark their measurements <!-- not run: ... -->).
var notRunDocuments = map[string]string{}

// block is one shell code block of a document.
type block struct {
	doc    string
	line   int    // of the opening fence, 1-based
	mode   string // run, server, perf_analyzer, not run
	reason string // for not run
	text   string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.doc, b.line) }

var (
	shellFence = regexp.MustCompile("^```(sh|bash|shell|console)\\s*$")
	marker     = regexp.MustCompile(`^<!-- (run|run: server|run: perf_analyzer|run: long|not run: (.*\S)) -->$`)
	anyMarker  = regexp.MustCompile(`^<!-- (not )?run\b`)
)

// generatedBegin and generatedEnd delimit a tool's generated block.
var (
	generatedBegin = regexp.MustCompile(`^<!-- .*: BEGIN generated -->$`)
	generatedEnd   = regexp.MustCompile(`^<!-- .*: END generated -->$`)
)

// commandStart matches the first line of an untagged block that is a
// command, not output: it must be fenced as sh and marked like the others.
var commandStart = regexp.MustCompile(`^(\$ |go |make |bin/|curl |cd |scripts/|tests/|flock |ratebatch |[A-Z_]+=\S* )`)

// shellBlocks returns doc's shell blocks, and an error per block whose
// marker is missing or malformed.
func shellBlocks(doc, text string) ([]block, []error) {
	var out []block
	var errs []error
	lines := strings.Split(text, "\n")
	generated := false
	for i := 0; i < len(lines); i++ {
		switch {
		case generatedBegin.MatchString(lines[i]):
			generated = true
		case generatedEnd.MatchString(lines[i]):
			generated = false
		}
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		open := i
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
			j++
		}
		i = j
		if generated {
			continue
		}
		k := open - 1
		for k >= 0 && strings.TrimSpace(lines[k]) == "" {
			k--
		}
		marked := k >= 0 && anyMarker.MatchString(strings.TrimSpace(lines[k]))
		if !shellFence.MatchString(lines[open]) {
			// An untagged block is a shell block when it is marked; one
			// that starts with a command must be.
			untagged := strings.TrimSpace(lines[open]) == "```"
			if !untagged || !marked {
				if untagged && open+1 < j && commandStart.MatchString(lines[open+1]) {
					errs = append(errs, fmt.Errorf("%s:%d: a command in an unmarked block: mark it (and fence it ```sh)", doc, open+1))
				}
				continue
			}
		}
		b := block{doc: doc, line: open + 1, text: strings.Join(lines[open+1:min(j, len(lines))], "\n") + "\n"}
		var m []string
		if k >= 0 {
			m = marker.FindStringSubmatch(strings.TrimSpace(lines[k]))
		}
		switch {
		case m == nil && k >= 0 && anyMarker.MatchString(strings.TrimSpace(lines[k])):
			errs = append(errs, fmt.Errorf("%s: malformed marker %q (want <!-- run -->, <!-- run: server -->, <!-- run: perf_analyzer -->, <!-- run: long --> or <!-- not run: REASON -->)", b, lines[k]))
			continue
		case m == nil:
			errs = append(errs, fmt.Errorf("%s: shell block without a marker: precede it with <!-- run --> (or run: server, run: perf_analyzer, run: long) or <!-- not run: REASON -->", b))
			continue
		case m[2] != "":
			b.mode, b.reason = "not run", m[2]
		case m[1] == "run":
			b.mode = "run"
		default:
			b.mode = strings.TrimPrefix(m[1], "run: ")
		}
		out = append(out, b)
	}
	return out, errs
}

// coveredDocuments lists README.md, docs/*.md and docs/results/*.md in
// run order, paths relative to this directory, without notRunDocuments.
func coveredDocuments(t *testing.T) []string {
	t.Helper()
	out := []string{filepath.Join("..", "README.md")}
	for _, d := range pages(t) {
		if _, skip := notRunDocuments[d]; !skip {
			out = append(out, d)
		}
	}
	return out
}

// bareRatebatch finds a command line calling ratebatch from PATH: on a fresh
// clone after `make demo` the binary is bin/ratebatch, not on PATH.
var bareRatebatch = regexp.MustCompile(`(?m)(^|[;&|(]\s*|\bdo\s+|\bthen\s+)ratebatch\s`)

func allBlocks(t *testing.T) []block {
	t.Helper()
	var all []block
	for _, doc := range coveredDocuments(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks, errs := shellBlocks(doc, string(data))
		for _, err := range errs {
			t.Error(err)
		}
		all = append(all, blocks...)
	}
	return all
}

// TestDocsCommandsAreMarked: every shell block says whether the run test
// runs it, a block not run says why, a server block is one command, and no
// block calls a ratebatch that is not there on a fresh clone.
func TestDocsCommandsAreMarked(t *testing.T) {
	all := allBlocks(t)
	modes := map[string]int{}
	for _, b := range all {
		modes[b.mode]++
		if bareRatebatch.MatchString(strings.Join(commandLines(b.text), "\n")) {
			t.Errorf("%s: calls ratebatch from PATH; on a fresh clone it is bin/ratebatch", b)
		}
		if b.mode == "server" && len(commandLines(b.text)) != 1 {
			t.Errorf("%s: a server block holds exactly one command, not %q", b, commandLines(b.text))
		}
	}
	if modes["run"] < 5 || modes["server"] < 2 {
		t.Fatalf("blocks by mode %v: README's runnable commands are no longer found", modes)
	}
}

func TestShellBlocksParse(t *testing.T) {
	text := "<!-- run -->\n```sh\necho a\n```\n\n<!-- not run: no GPU -->\n\n```bash\nnvidia-smi\n```\n" +
		"```sh\nunmarked\n```\n<!-- run: later -->\n```sh\nbad\n```\n```yaml\nx: 1\n```\n<!-- run: server -->\n```sh\nserve\n```\n" +
		"```\nRATEBATCH_LONG=1 go test ./x\n```\n```\noutput, not a command\n```\n<!-- not run: long -->\n```\ngo test ./y\n```\n" +
		"<!-- tool: BEGIN generated -->\n```\nmake build\n```\n<!-- tool: END generated -->\n```\nmake again\n```\n"
	blocks, errs := shellBlocks("d.md", text)
	var got []string
	for _, b := range blocks {
		got = append(got, fmt.Sprintf("%d %s %q %q", b.line, b.mode, b.reason, b.text))
	}
	want := []string{`2 run "" "echo a\n"`, `8 not run "no GPU" "nvidia-smi\n"`, `22 server "" "serve\n"`, `32 not run "long" "go test ./y\n"`}
	if !slices.Equal(got, want) {
		t.Errorf("blocks\n got %q\nwant %q", got, want)
	}
	if len(errs) != 4 || !strings.Contains(errs[0].Error(), "d.md:11: shell block without a marker") ||
		!strings.Contains(errs[1].Error(), "d.md:15: malformed marker") ||
		!strings.Contains(errs[2].Error(), "d.md:25: a command in an unmarked block") ||
		!strings.Contains(errs[3].Error(), "d.md:40: a command in an unmarked block") {
		t.Errorf("errors %v, want the unmarked block at 11, the malformed marker at 15, the untagged commands at 25 and 40 (not the generated one at 36)", errs)
	}
}

// commandLines returns the lines of a script that are not blank or
// comments, without trailing comments (" # ...").
func commandLines(script string) []string {
	var out []string
	for _, l := range strings.Split(script, "\n") {
		l, _, _ = strings.Cut(l, " #")
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// wellKnownPort matches Triton's and ratebatch's usual ports after a
// colon, and the HTTPS and admin ports of docs/CONFIG.md's TLS example.
var wellKnownPort = regexp.MustCompile(`:(8000|8001|8002|9000|9001|9002|9443|9444)\b`)

// freePorts maps each well-known port to a free loopback port.
func freePorts(t *testing.T) map[string]string {
	t.Helper()
	ports := map[string]string{}
	var held []net.Listener
	for _, p := range []string{"8000", "8001", "8002", "9000", "9001", "9002", "9443", "9444"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		ports[p] = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range held {
		ln.Close()
	}
	return ports
}

func substitutePorts(text string, ports map[string]string) string {
	return wellKnownPort.ReplaceAllStringFunc(text, func(m string) string { return ":" + ports[m[1:]] })
}

// scratchClone fills dir (which holds bin/ratebatch) with symlinks to every
// top-level entry of the repository but bin and .git.
func scratchClone(t *testing.T, dir string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "bin" || e.Name() == ".git" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
}

// environ is the test's environment without RATEBATCH_* settings (a token
// or an upstream set for this shell must not change what the documents
// do), except RATEBATCH_VENV, where perf_analyzer is.
func environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RATEBATCH_") && !strings.HasPrefix(kv, "RATEBATCH_VENV=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func havePerfAnalyzer(clone string) (bool, string) {
	venv := os.Getenv("RATEBATCH_VENV")
	if venv == "" {
		venv = filepath.Join(clone, ".venv")
	}
	if _, err := os.Stat(filepath.Join(venv, "bin", "perf_analyzer")); err != nil {
		return false, "no perf_analyzer in " + venv + " (make test or scripts/setup-python.sh installs it; RATEBATCH_VENV points elsewhere)"
	}
	return true, ""
}

// lockedBuffer is a server's output: written by exec's copying goroutine,
// read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// listenFlag matches a --*listen flag's port.
var listenFlag = regexp.MustCompile(`--([a-z-]*listen)[= ](\S*):(\d+)`)

func startServer(t *testing.T, b block, dir string, env []string) {
	t.Helper()
	line := commandLines(b.text)[0]
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("%s: the server's output:\n%s", b, out)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for _, m := range listenFlag.FindAllStringSubmatch(line, -1) {
		addr := "127.0.0.1:" + m[3]
		ready := func() bool {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false
			}
			c.Close()
			if m[1] != "admin-listen" {
				return true
			}
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
		for !ready() {
			select {
			case err := <-exited:
				exited <- err
				t.Fatalf("%s: the server exited before %s was ready: %v\n%s", b, addr, err, out)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: --%s %s not ready after 60s\n%s", b, m[1], addr, out)
			}
		}
	}
}

// runBlock runs a block's script; the error carries its output.
func runBlock(b block, dir string, env []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.text)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n--- script:\n%s--- output:\n%s", err, b.text, out)
	}
	return nil
}

func TestDocsCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every marked command of the documents against the emulator; skipped with -short")
	}
	t.Parallel() // mostly waiting on its commands, beside TestLatencyCostTableIsReproduced's simulations
	all := allBlocks(t)
	if t.Failed() {
		t.FailNow()
	}
	bin := ratebatch(t)
	clone := filepath.Dir(filepath.Dir(bin))
	scratchClone(t, clone)
	ports := freePorts(t)
	env := environ()
	t.Logf("scratch clone %s; ports %v", clone, ports)
	for _, b := range all {
		b.text = substitutePorts(b.text, ports)
		switch b.mode {
		case "not run":
			t.Logf("%s: not run: %s", b, b.reason)
			checkGoTestCommands(t, b, clone, env)
			continue
		case "perf_analyzer":
			if ok, why := havePerfAnalyzer(clone); !ok {
				t.Logf("%s: not run: %s", b, why)
				continue
			}
		case "long":
			if os.Getenv("RATEBATCH_LONG") == "" {
				t.Logf("%s: not run: takes long; RATEBATCH_LONG=1 runs it", b)
				checkGoTestCommands(t, b, clone, env)
				continue
			}
		case "server":
			startServer(t, b, clone, env)
			t.Logf("%s: serving", b)
			continue
		}
		start := time.Now()
		if err := runBlock(b, clone, env); err != nil {
			t.Errorf("%s: the command fails as written: %v", b, err)
			continue
		}
		t.Logf("%s: ran in %v", b, time.Since(start).Round(time.Millisecond))
	}
}

// goTestLine finds `go test` commands: optional `cd DIR &&`, environment
// assignments, then go test and its arguments.
var goTestLine = regexp.MustCompile(`(?m)^\s*(?:cd (\S+) && )?(?:[A-Z_]+=\S* )*go test (.*)$`)

// checkGoTestCommands lists the tests a `go test` command of a block that
// is not run would run: none means a stale package path or test name.
func checkGoTestCommands(t *testing.T, b block, clone string, env []string) {
	t.Helper()
	for _, m := range goTestLine.FindAllStringSubmatch(b.text, -1) {
		args := shellWords(m[2])
		var pattern string
		var pkgs []string
		for i := 0; i < len(args); i++ {
			a := args[i]
			switch {
			case a == "-run" || a == "-bench" || a == "-fuzz":
				if i+1 < len(args) {
					if v := args[i+1]; pattern == "" || pattern == "^$" {
						pattern = v
					}
					i++
				}
			case slices.Contains([]string{"-count", "-fuzztime", "-benchtime", "-timeout", "-cpu", "-tags", "-parallel"}, a):
				i++
			case strings.HasPrefix(a, "-"):
			default:
				pkgs = append(pkgs, a)
			}
		}
		if pattern == "" || pattern == "^$" {
			continue // runs every test of its packages: nothing to name
		}
		dir := clone
		if m[1] != "" {
			dir = filepath.Join(clone, m[1])
		}
		named, err := listTests(dir, env, pattern, pkgs)
		if err != nil {
			t.Errorf("%s: go test -list %s %s: %v", b, pattern, strings.Join(pkgs, " "), err)
			continue
		}
		if len(named) == 0 {
			t.Errorf("%s: `go test %s` runs nothing: no test in %s matches %s", b, m[2], strings.Join(pkgs, " "), pattern)
		}
	}
}

// listTests is what `go test -list pattern pkgs` prints (run in dir),
// read from the sources instead of built: the top-level tests, benchmarks,
// fuzz tests and examples of the packages' test files (go list's, for this
// platform and no build tags) whose names match pattern. Building them
// would compile each named package's tests anew in the scratch clone,
// whose paths no build cache knows: most of this test's time.
func listTests(dir string, env []string, pattern string, pkgs []string) ([]string, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	const format = `{{if .Error}}{{.Error}}{{"\n"}}{{else}}{{.Dir}}{{range .TestGoFiles}}{{"\t"}}{{.}}{{end}}{{range .XTestGoFiles}}{{"\t"}}{{.}}{{end}}{{"\n"}}{{end}}`
	cmd := exec.Command("go", append([]string{"list", "-e", "-f", format}, pkgs...)...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr)
	}
	var named []string
	fset := token.NewFileSet()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "\t")
		if !filepath.IsAbs(fields[0]) {
			return nil, errors.New(line) // the package's error
		}
		for _, name := range fields[1:] {
			f, err := parser.ParseFile(fset, filepath.Join(fields[0], name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && isTestFunc(fn.Name.Name) && re.MatchString(fn.Name.Name) {
					named = append(named, fn.Name.Name)
				}
			}
		}
	}
	return named, nil
}

// TestListTests: listTests names what go test -list names, from the
// sources: a package's tests whose names match, none for a pattern that
// matches nothing or a lower-case continuation (Testify is no test), an
// error for a package that does not exist.
func TestListTests(t *testing.T) {
	env := environ()
	for _, c := range []struct {
		pattern string
		pkgs    []string
		want    []string
	}{
		{"^TestListTests$|^TestDocsCommandsRun$", []string{"./docs"}, []string{"TestDocsCommandsRun", "TestListTests"}},
		{"^TestDocsCommandsRun$", []string{"./docs", "./lab/sim"}, []string{"TestDocsCommandsRun"}},
		{"^TestNoSuchTest$", []string{"./docs"}, nil},
		{"^FuzzSplitRows$", []string{"./kserve"}, []string{"FuzzSplitRows"}},
	} {
		got, err := listTests("..", env, c.pattern, c.pkgs)
		if err != nil {
			t.Fatalf("%s %v: %v", c.pattern, c.pkgs, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %v: %v, want %v", c.pattern, c.pkgs, got, c.want)
		}
	}
	if got, err := listTests("..", env, ".", []string{"./nosuchpackage"}); err == nil {
		t.Errorf("a package that does not exist: %v, no error", got)
	}
	for name, want := range map[string]bool{"Test": true, "TestX": true, "Test_x": true, "Testify": false, "BenchmarkRun": true, "ExampleServer": true, "FuzzFoo": true, "helper": false} {
		if isTestFunc(name) != want {
			t.Errorf("isTestFunc(%q) = %v", name, !want)
		}
	}
}

// isTestFunc says whether go test runs a function of this name: Test,
// Benchmark, Fuzz or Example, then nothing or not a lower-case letter.
func isTestFunc(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			r, _ := utf8.DecodeRuneInString(rest)
			return rest == "" || !unicode.IsLower(r)
		}
	}
	return false
}

// shellWords splits a command line into words, honouring single and double
// quotes (enough for the documents' go test lines).
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote, word := false, byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, word = c, true
		case c == ' ' || c == '\t':
			if word {
				out = append(out, cur.String())
				cur.Reset()
				word = false
			}
		case c == '#' && !word:
			in = true
		default:
			cur.WriteByte(c)
			word = true
		}
		if in {
			break
		}
	}
	if word {
		out = append(out, cur.String())
	}
	return out
}
