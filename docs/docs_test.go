// Package docs_test keeps the project's documents true to the repository:
// every relative link in README.md and docs/*.md names a file of the clone,
// their code blocks close, and ARCHITECTURE.md's package table names every
// package `go list` finds.
// Both rotted once (links to design notes outside the repository, a table
// listing 12 of 22 packages); this test makes a repeat fail CI.
package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// link matches the target of a Markdown link or image: [text](target) or
// ![alt](target "title").
var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// documents lists README.md and docs/*.md, paths relative to the repository root.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join("..", "README.md")}, docs...)
}

// relativeLinks returns the link targets of a Markdown text that point into
// the repository: no scheme, no pure #anchor, fenced code skipped.
func relativeLinks(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
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

func TestArchitectureNamesEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	arch, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/ratebatch/ratebatch/"
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages: %q", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p, module)
		if !strings.Contains(string(arch), "| `"+rel+"` |") {
			t.Errorf("docs/ARCHITECTURE.md: the package table has no row for %s", rel)
		}
	}
}
