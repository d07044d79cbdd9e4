// Package docs_test keeps the project's documents true to the repository:
// every relative link in README.md, docs/*.md and docs/results/*.md names
// a file of the clone (and its #anchor a heading there), their code blocks
// close, and ARCHITECTURE.md's package table names every package `go
// list` finds.
// Both rotted once (links to design notes outside the repository, a table
// listing 12 of 22 packages); this test makes a repeat fail CI.
package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// link matches the target of a Markdown link or image: [text](target) or
// ![alt](target "title").
var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// documents lists README.md, docs/*.md and docs/results/*.md, paths
// relative to this directory.
func documents(t *testing.T) []string {
	t.Helper()
	return append([]string{filepath.Join("..", "README.md")}, pages(t)...)
}

// pages lists docs/*.md and then docs/results/*.md, each sorted, paths
// relative to this directory.
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"*.md", filepath.Join(resultsDir, "*.md")} {
		docs, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(docs)
		out = append(out, docs...)
	}
	return out
}

// resultsDir holds the results pages: one question a page, each section a
// measurement with its command and date (results_test.go).
const resultsDir = "results"

// proseLine is a line of a Markdown text outside fenced code.
type proseLine struct {
	n    int // 1-based
	text string
}

// proseLines returns the lines of text outside fenced code blocks (the
// fences themselves left out too).
func proseLines(text string) []proseLine {
	var out []proseLine
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, proseLine{i + 1, line})
		}
	}
	return out
}

// relativeLinks returns the link targets of a Markdown text that point into
// the repository: no scheme, no pure #anchor, fenced code skipped.
func relativeLinks(text string) []string {
	var out []string
	for _, line := range proseLines(text) {
		for _, m := range link.FindAllStringSubmatch(line.text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			out = append(out, target)
		}
	}
	return out
}

func TestRelativeLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, doc := range documents(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range relativeLinks(string(data)) {
			checked++
			p, err := filepath.Abs(filepath.Join(filepath.Dir(doc), filepath.FromSlash(target)))
			if err != nil {
				t.Fatal(err)
			}
			if rel, err := filepath.Rel(root, p); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: link %q leaves the repository: a clone does not have it", doc, target)
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: link %q does not resolve: %v", doc, target, err)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d relative links found: the link pattern no longer matches the documents", checked)
	}
}

// TestCodeFencesClose: a code block closes with a fence alone on its line.
// Text after the closing fence (it happened twice, in README.md and
// BENCHMARKS.md) keeps the block open in Markdown and swallows what follows.
func TestCodeFencesClose(t *testing.T) {
	for _, doc := range documents(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for i, line := range strings.Split(string(b), "\n") {
			trimmed := strings.TrimSpace(line)
			if !strings.HasPrefix(trimmed, "```") {
				continue
			}
			if fenced && trimmed != "```" {
				t.Errorf("%s:%d: text after the fence that closes a code block: %q", doc, i+1, line)
			}
			fenced = !fenced
		}
		if fenced {
			t.Errorf("%s: a code block is never closed", doc)
		}
	}
}

func TestRelativeLinksPattern(t *testing.T) {
	text := "see [A](docs/A.md) and ![img](img/x.svg \"t\") and [web](https://x.org/y) and [top](#demo)\n" +
		"```\n[not](in/code.md)\n```\n[B](../shared/B.md#sec)\n"
	got := strings.Join(relativeLinks(text), " ")
	if want := "docs/A.md img/x.svg ../shared/B.md"; got != want {
		t.Fatalf("relativeLinks = %q, want %q", got, want)
	}
}

// goList returns the module's packages, paths relative to the module, with
// the given template's output after a tab.
func goList(t *testing.T, format string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t"+format, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, rest, _ := strings.Cut(line, "\t")
		pkgs[strings.TrimPrefix(path, module)] = rest
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages: %q", len(pkgs), pkgs)
	}
	return pkgs
}

const module = "github.com/ratebatch/ratebatch/"

// tableRow matches a row of ARCHITECTURE.md's package table.
var tableRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

// TestArchitectureNamesEveryPackage: the package table has a row for every
// package and no row for a package that does not exist (one renamed or
// moved without its row).
func TestArchitectureNamesEveryPackage(t *testing.T) {
	pkgs := goList(t, "")
	arch, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range tableRow.FindAllStringSubmatch(string(arch), -1) {
		rows[m[1]] = true
		if _, ok := pkgs[m[1]]; !ok {
			t.Errorf("docs/ARCHITECTURE.md: the package table names %s, which go list does not find", m[1])
		}
	}
	for rel := range pkgs {
		if !rows[rel] {
			t.Errorf("docs/ARCHITECTURE.md: the package table has no row for %s", rel)
		}
	}
}

// TestProductDoesNotImportLab: the layout's promise that lab/ is a wing the
// product never enters. Only cmd/ and lab/ itself may import it (tests
// anywhere may, and are not listed by .Imports).
func TestProductDoesNotImportLab(t *testing.T) {
	for rel, imports := range goList(t, "{{join .Imports \" \"}}") {
		if strings.HasPrefix(rel, "lab/") || strings.HasPrefix(rel, "cmd/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, module+"lab/") {
				t.Errorf("%s imports %s: the product must not depend on the laboratory", rel, strings.TrimPrefix(imp, module))
			}
		}
	}
}

// TestOnlyTestsImportTestpoll: internal/testpoll, the tests' way to wait,
// is imported by tests and by test helpers (packages named *test, as
// server/servertest) only, never by the code a binary runs.
func TestOnlyTestsImportTestpoll(t *testing.T) {
	for rel, imports := range goList(t, "{{join .Imports \" \"}}") {
		if strings.HasSuffix(rel, "test") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == module+"internal/testpoll" {
				t.Errorf("%s imports internal/testpoll: only tests and test helpers may", rel)
			}
		}
	}
}

// noRacePkgs matches the Makefile's list of the packages make test runs
// without the race detector.
var noRacePkgs = regexp.MustCompile(`(?m)^NORACE_PKGS := (.*)$`)

// TestNoRacePackagesStartNoGoroutine: the packages make test runs without
// the race detector (the Makefile's NORACE_PKGS) have no go statement in
// their code or tests: the detector finds races between goroutines, and
// a package that starts one must run under it. (go test -trace shows that
// what they call starts none either: only the testing package's
// goroutines appear.)
func TestNoRacePackagesStartNoGoroutine(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := noRacePkgs.FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no NORACE_PKGS := line")
	}
	for _, pkg := range strings.Fields(string(m[1])) {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("NORACE_PKGS names %s, which has no Go files (%v)", pkg, err)
			continue
		}
		fset := token.NewFileSet()
		for _, file := range files {
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if g, ok := n.(*ast.GoStmt); ok {
					t.Errorf("%s: a go statement in %s, which make test runs without the race detector: take it out of the Makefile's NORACE_PKGS", fset.Position(g.Pos()), pkg)
				}
				return true
			})
		}
	}
}
