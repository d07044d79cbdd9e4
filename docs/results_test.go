package docs_test

// The documents describe the product as it is, and every figure says where
// it comes from. Three conventions, checked here:
//
//   - A results page (docs/results/*.md) answers one question; each of its
//     "## " sections is one measurement and carries the command that made
//     it (a shell block, marked as commands_test.go requires, so that the
//     docs test runs it or says why not) and a line "Measured YYYY-MM-DD"
//     (more dates may follow on the line). Text before the first section
//     holds no table: a figure outside a section would have no command.
//   - No document (README.md, docs/*.md, docs/results/*.md) names the work
//     that made it: a work session, a round, an issue number, "this
//     build"; and no commit id appears outside a tool's generated block.
//     The history stays in git.
//   - Every #anchor of a link names a heading of the document it points to.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// measured matches a results section's date line.
var measured = regexp.MustCompile(`(?m)^Measured (\d{4}-\d{2}-\d{2})\b`)

// resultSection is one "## " section of a results page.
type resultSection struct {
	heading     string
	first, last int // 1-based lines, heading included
	text        string
}

// resultSections splits a page into its preamble (before the first "## ")
// and its "## " sections; fenced code does not count as headings.
func resultSections(text string) (preamble string, sections []resultSection) {
	lines := strings.Split(text, "\n")
	fenced := false
	var pre []string
	cur := -1
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "## ") {
			sections = append(sections, resultSection{heading: line, first: i + 1})
			cur = len(sections) - 1
		}
		if cur < 0 {
			pre = append(pre, line)
			continue
		}
		sections[cur].text += line + "\n"
		sections[cur].last = i + 1
	}
	return strings.Join(pre, "\n"), sections
}

// tableLine matches a Markdown table row.
var tableLine = regexp.MustCompile(`(?m)^\|.*\|\s*$`)

// checkResultsPage returns what page (its text) lacks of the convention.
func checkResultsPage(doc, text string, today time.Time) []error {
	var errs []error
	preamble, sections := resultSections(text)
	if len(sections) == 0 {
		errs = append(errs, fmt.Errorf("%s: no \"## \" section: a results page holds its measurements in sections", doc))
	}
	if tableLine.MatchString(stripFenced(preamble)) {
		errs = append(errs, fmt.Errorf("%s: a table before the first section: move it into a section with its command and date", doc))
	}
	blocks, _ := shellBlocks(doc, text)
	for _, s := range sections {
		m := measured.FindStringSubmatch(s.text)
		switch {
		case m == nil:
			errs = append(errs, fmt.Errorf("%s:%d %q: no line \"Measured YYYY-MM-DD\"", doc, s.first, s.heading))
		default:
			d, err := time.Parse(time.DateOnly, m[1])
			if err != nil || d.After(today) {
				errs = append(errs, fmt.Errorf("%s:%d %q: %q is not a date of a past measurement", doc, s.first, s.heading, m[0]))
			}
		}
		if !slices.ContainsFunc(blocks, func(b block) bool { return b.line > s.first && b.line <= s.last }) {
			errs = append(errs, fmt.Errorf("%s:%d %q: no marked shell block with the command that measured it", doc, s.first, s.heading))
		}
	}
	return errs
}

func TestResultsSectionsCarryCommandAndDate(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(resultsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("%d results pages found in %s, want the pages README's results table links", len(docs), resultsDir)
	}
	sections := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, s := resultSections(string(b))
		sections += len(s)
		for _, err := range checkResultsPage(doc, string(b), time.Now()) {
			t.Error(err)
		}
	}
	if sections < 15 {
		t.Fatalf("%d results sections found: the section pattern no longer matches the pages", sections)
	}
}

func TestResultsPageConvention(t *testing.T) {
	today := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	good := "# Q\n\nWhy.\n\n## A\n\nMeasured 2026-11-27.\n\n<!-- not run: long -->\n```sh\nscripts/x.sh\n```\n\n| a | b |\n|---|---|\n"
	if errs := checkResultsPage("p.md", good, today); len(errs) != 0 {
		t.Errorf("a page with its command and date: %v", errs)
	}
	for name, tc := range map[string]struct{ text, want string }{
		"no date":          {"# Q\n## A\n<!-- run -->\n```sh\nx\n```\n| 1 |\n", `no line "Measured`},
		"future date":      {"# Q\n## A\nMeasured 2027-01-01.\n<!-- run -->\n```sh\nx\n```\n", "not a date of a past measurement"},
		"no command":       {"# Q\n## A\nMeasured 2026-11-01.\n| 1 |\n", "no marked shell block"},
		"unmarked command": {"# Q\n## A\nMeasured 2026-11-01.\n```sh\nx\n```\n", "no marked shell block"},
		"command elsewhere": {"# Q\n## A\nMeasured 2026-11-01.\n| 1 |\n## B\nMeasured 2026-11-01.\n<!-- run -->\n```sh\nx\n```\n",
			`"## A": no marked shell block`},
		"table first": {"# Q\n| 1 | 2 |\n## A\nMeasured 2026-11-01.\n<!-- run -->\n```sh\nx\n```\n", "a table before the first section"},
		"no section":  {"# Q\ntext\n", `no "## " section`},
	} {
		errs := checkResultsPage("p.md", tc.text, today)
		if !slices.ContainsFunc(errs, func(e error) bool { return strings.Contains(e.Error(), tc.want) }) {
			t.Errorf("%s: errors %v, want one containing %q", name, errs, tc.want)
		}
	}
}

// history matches words that name the work rather than the product.
var history = regexp.MustCompile(`(?i)\b(?:` + strings.Join([]string{
	`(?:work )?sessions? \d+`,
	`(?:this|that|the last|last|next|the next|previous|the previous|an earlier|earlier|a later|later|the first|one) (?:work )?session`,
	`\(session\b`,
	`rounds? (?:one|two|three|four|five|six|\d+)(?:'s)?`,
	`(?:this|that|last|next|previous|the previous|the first|the second|the third|an earlier|a later|every|each) round\b`,
	`issues? #?\d+`,
	`the issue(?:'s)? (?:load|target|asks|names|says|first)`,
	`this (?:build|tree|branch)`,
}, "|") + `)`)

// commitID matches a hexadecimal word of 7 to 40 characters with a digit
// and a letter: an abbreviated or full commit id.
var commitID = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)

func isCommitID(w string) bool {
	return strings.ContainsAny(w, "0123456789") && strings.ContainsAny(w, "abcdef")
}

// historyErrors returns a line's history words and commit ids, outside
// fenced code for the words (a command may name a file such as
// session.go) and outside a tool's generated block for both.
func historyErrors(doc, text string) []error {
	var errs []error
	fenced, generated := false, false
	for i, line := range strings.Split(text, "\n") {
		switch {
		case generatedBegin.MatchString(line):
			generated = true
		case generatedEnd.MatchString(line):
			generated = false
		}
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if generated {
			continue
		}
		if !fenced {
			for _, m := range history.FindAllString(line, -1) {
				errs = append(errs, fmt.Errorf("%s:%d: names the work, not the product: %q", doc, i+1, m))
			}
		}
		for _, m := range commitID.FindAllString(line, -1) {
			if isCommitID(m) {
				errs = append(errs, fmt.Errorf("%s:%d: a commit id: %q (the history stays in git)", doc, i+1, m))
			}
		}
	}
	return errs
}

func TestDocsNameNoHistory(t *testing.T) {
	for _, doc := range documents(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range historyErrors(doc, string(b)) {
			t.Error(err)
		}
	}
}

func TestHistoryPattern(t *testing.T) {
	for _, bad := range []string{
		"as in session 14", "the default until this round", "issue 36's fresh clone", "(session 16)",
		"measured with this build", "round three's additions", "Issue 19: where", "on 93e8e9c alone",
		"in the last session", "the issue's load",
	} {
		if len(historyErrors("d.md", bad)) == 0 {
			t.Errorf("%q: not found", bad)
		}
	}
	for _, ok := range []string{
		"a round trip of 2 ms", "rounded as the table rounds", "in rounds of 400", "TLS session resumption",
		"the issue of a certificate", "deadbeef", "1234567", "```\nsession 1\n```",
		"<!-- tool: BEGIN generated -->\nat commit 6f62508\n<!-- tool: END generated -->",
	} {
		if errs := historyErrors("d.md", ok); len(errs) != 0 {
			t.Errorf("%q: %v", ok, errs)
		}
	}
}

// anchorLink matches a Markdown link's target with an #anchor.
var anchorLink = regexp.MustCompile(`\]\(([^)\s#]*)#([^)\s]+)\)`)

// slug is GitHub's anchor of a heading: lower case, punctuation but - and
// _ dropped, spaces made hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '×' && r != '→':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a document's headings, with GitHub's -1,
// -2 suffixes for repeated ones.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		if !strings.HasPrefix(line.text, "#") {
			continue
		}
		h := strings.TrimLeft(line.text, "#")
		if h == "" || h[0] != ' ' {
			continue
		}
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestAnchorsResolve(t *testing.T) {
	checked := 0
	for _, doc := range documents(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range proseLines(string(b)) {
			for _, m := range anchorLink.FindAllStringSubmatch(line.text, -1) {
				target := doc
				if m[1] != "" {
					if strings.Contains(m[1], "://") || !strings.HasSuffix(m[1], ".md") {
						continue
					}
					target = filepath.Join(filepath.Dir(doc), filepath.FromSlash(m[1]))
				}
				t2, err := os.ReadFile(target)
				if err != nil {
					continue // TestRelativeLinksResolve reports the file
				}
				checked++
				if !anchors(string(t2))[m[2]] {
					t.Errorf("%s:%d: #%s is no heading of %s", doc, line.n, m[2], target)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d anchors checked: the pattern no longer matches the documents", checked)
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		" Live, Poisson arrivals, rho 0.1 and 0.5":            "live-poisson-arrivals-rho-01-and-05",
		" Memory: a budget for requests and answers":          "memory-a-budget-for-requests-and-answers",
		" The closed loop, planned live":                      "the-closed-loop-planned-live",
		" `budget` (default): what it does":                   "budget-default-what-it-does",
		" Sources: a partner that cannot come":                "sources-a-partner-that-cannot-come",
		" End to end, where batches save upstream work":       "end-to-end-where-batches-save-upstream-work",
		" Changing the policy at run time":                    "changing-the-policy-at-run-time",
		" Solves within a share of a core":                    "solves-within-a-share-of-a-core",
		" The gRPC relay":                                     "the-grpc-relay",
		" Live on a real Triton (PyTriton), Poisson arrivals": "live-on-a-real-triton-pytriton-poisson-arrivals",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
	if a := anchors("# A\n## B\n## B\n```\n# C\n```\n"); !a["a"] || !a["b"] || !a["b-1"] || a["c"] {
		t.Errorf("anchors = %v", a)
	}
}

// stripFenced drops fenced code from text.
func stripFenced(text string) string {
	var out []string
	for _, line := range proseLines(text) {
		out = append(out, line.text)
	}
	return strings.Join(out, "\n")
}

// resultsLink matches a link into docs/results from README.
var resultsLink = regexp.MustCompile(`\]\(docs/results/[a-z-]+\.md(#[^)]*)?\)`)

// readmeFigureErrors returns README's figures that do not link the
// results page holding their command: each row of the table under
// "## Results" and each bullet of the "Should I use it?" box.
func readmeFigureErrors(results, box string) []error {
	var errs []error
	for i, row := range tableLine.FindAllString(results, -1) {
		if i == 0 || strings.HasPrefix(row, "|---") { // the header, the rule under it
			continue
		}
		if !resultsLink.MatchString(row) {
			errs = append(errs, fmt.Errorf("README.md, Results: a row without the link to its results page: %s", row))
		}
	}
	for _, bullet := range strings.Split(box, "\n> - ")[1:] {
		if !resultsLink.MatchString(bullet) {
			errs = append(errs, fmt.Errorf("README.md, Should I use it?: a point without the link to its results page: %.60s...", bullet))
		}
	}
	return errs
}

// TestReadmeFiguresLinkTheirPage: README quotes figures only with a link
// to the results page that holds their command and date.
func TestReadmeFiguresLinkTheirPage(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "> **Should I use it?**")
	if i < 0 {
		t.Fatal(`README.md: no "Should I use it?" box`)
	}
	box, _, _ := strings.Cut(text[i:], "\n\n<")
	if j := strings.Index(box, "\n\n"); j >= 0 && !strings.HasPrefix(box[j+2:], ">") {
		box = box[:j]
	}
	results := section(t, "../README.md", "## Results")
	if n := len(tableLine.FindAllString(results, -1)); n < 5 {
		t.Fatalf("README.md, Results: %d table lines, want the headline table", n)
	}
	for _, err := range readmeFigureErrors(results, box) {
		t.Error(err)
	}
}

func TestReadmeFigurePattern(t *testing.T) {
	results := "| question | answer | page |\n|---|---|---|\n| a | 1.1x | [p](docs/results/p.md#s) |\n| b | 2x | none |\n"
	box := "> **Should I use it?**\n>\n> - gain ([x](docs/results/x.md))\n> - cost, unlinked\n"
	errs := readmeFigureErrors(results, box)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "| b | 2x") || !strings.Contains(errs[1].Error(), "cost, unlinked") {
		t.Errorf("errors %v, want the unlinked row and the unlinked point", errs)
	}
}
