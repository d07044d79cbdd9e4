package docs_test

// The documents' lists of policies and options, checked against where the
// code declares them: policy names in package policy's registry
// (config.Policies adds "passthrough"), options in config's schema
// (config.BindFlags registers one flag per option, its usage naming the
// YAML key and the environment variable), per-model overrides in
// config.Model. Each list rotted once: README's policy table lacked budget,
// CONFIG.md's PUT /policy table too, and README claimed three spellings for
// `models`, which has only YAML.

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/policy"
)

// section returns the text of doc from the heading line that starts with
// heading up to the next heading of the same or a higher level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n"+heading)
	if i < 0 {
		t.Fatalf("%s: no heading %q", doc, heading)
	}
	level := strings.Count(strings.Fields(heading)[0], "#")
	rest := text[i+1:]
	lines := strings.SplitAfter(rest, "\n")
	n := len(lines[0])
	for _, line := range lines[1:] {
		if h := strings.Fields(line); len(h) > 0 && strings.Trim(h[0], "#") == "" && len(h[0]) <= level {
			break
		}
		n += len(line)
	}
	return rest[:n]
}

// firstColumnCodes returns the code spans in the first column of the
// Markdown table rows of text: "| `adhoc` | ..." gives adhoc.
var firstColumn = regexp.MustCompile("(?m)^\\| `([^`]+)`")

func firstColumnCodes(text string) []string {
	var out []string
	for _, m := range firstColumn.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// sameSet reports what want has that got lacks, and what got has beyond want.
func sameSet(want, got []string) (missing, extra []string) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}

// TestReadmePolicyTableIsComplete: README's table under "## Policies" has a
// row for every policy serve accepts (config.Policies: the registered ones
// and passthrough) and none for a name it refuses.
func TestReadmePolicyTableIsComplete(t *testing.T) {
	rows := firstColumnCodes(section(t, "../README.md", "## Policies"))
	missing, extra := sameSet(config.Policies(), rows)
	if len(missing) > 0 {
		t.Errorf("README.md's policy table has no row for %q (registered in package policy)", missing)
	}
	if len(extra) > 0 {
		t.Errorf("README.md's policy table names %q, which serve does not accept", extra)
	}
	if len(policy.Names()) < 9 {
		t.Fatalf("policy.Names() = %q: the built-ins did not register", policy.Names())
	}
}

// TestConfigPutPolicyNamesEveryPolicy: CONFIG.md's table of PUT /policy's
// body lists every policy the call can switch to (policy.New's names; not
// passthrough, which is a per-model setting), and each key of the body
// the handler reads.
func TestConfigPutPolicyNamesEveryPolicy(t *testing.T) {
	sec := section(t, "CONFIG.md", "## Changing the policy at run time")
	var row string
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, "| `policy` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("CONFIG.md, \"Changing the policy at run time\": no table row for the key `policy`")
	}
	for _, name := range policy.Names() {
		if !strings.Contains(row, "`"+name+"`") {
			t.Errorf("CONFIG.md's PUT /policy table does not name the policy %s: %s", name, row)
		}
	}
	keys := firstColumnCodes(sec)
	for _, key := range []string{"model", "policy", "latency_budget"} {
		if !slices.Contains(keys, key) {
			t.Errorf("CONFIG.md's PUT /policy table has no row for the body key %q", key)
		}
	}
}

// option is one option as config.BindFlags registers it.
type option struct{ flag, yaml, env, usage string }

// spellings matches the tail of a BindFlags usage: "(yaml KEY, env VAR)".
var spellings = regexp.MustCompile(`\(yaml ([^,]+), env ([A-Z0-9_]+)\)$`)

func options(t *testing.T) []option {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	config.BindFlags(fs)
	var out []option
	fs.VisitAll(func(f *flag.Flag) {
		m := spellings.FindStringSubmatch(f.Usage)
		if m == nil {
			t.Errorf("flag --%s: usage %q does not name its YAML key and environment variable", f.Name, f.Usage)
			return
		}
		out = append(out, option{flag: f.Name, yaml: m[1], env: m[2], usage: f.Usage})
	})
	if len(out) < 30 {
		t.Fatalf("config.BindFlags registered only %d options", len(out))
	}
	return out
}

// optionRow matches a row of CONFIG.md's option table.
var optionRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\| `--([^`]+)` \\| `([A-Z0-9_]+)` \\|")

// TestConfigOptionTableIsComplete: CONFIG.md's option table has one row per
// option of the schema, with its three spellings, and no row for an option
// that does not exist. (config's TestConfigDocUpToDate keeps the generated
// block identical to config.Markdown; this checks the document against the
// flags serve registers, whichever way the table was made.)
func TestConfigOptionTableIsComplete(t *testing.T) {
	b, err := os.ReadFile("CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]option{}
	for _, m := range optionRow.FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = option{yaml: m[1], flag: m[2], env: m[3]}
	}
	seen := map[string]bool{}
	for _, o := range options(t) {
		seen[o.yaml] = true
		r, ok := rows[o.yaml]
		switch {
		case !ok:
			t.Errorf("CONFIG.md's option table has no row for %s (--%s, %s)", o.yaml, o.flag, o.env)
		case r.flag != o.flag || r.env != o.env:
			t.Errorf("CONFIG.md: %s is spelt --%s, %s; serve has --%s, %s", o.yaml, r.flag, r.env, o.flag, o.env)
		}
	}
	for key := range rows {
		if !seen[key] {
			t.Errorf("CONFIG.md's option table names %s, which serve does not have", key)
		}
	}
}

// TestConfigModelOverridesAreListed: every per-model override (a field of
// config.Model, YAML only) has a row `models.NAME.key` in CONFIG.md.
func TestConfigModelOverridesAreListed(t *testing.T) {
	b, err := os.ReadFile("CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	mt := reflect.TypeFor[config.Model]()
	for i := range mt.NumField() {
		key, _, _ := strings.Cut(mt.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		if !strings.Contains(doc, "| `models.NAME."+key+"` |") {
			t.Errorf("CONFIG.md has no row `models.NAME.%s` for config.Model's %s", key, mt.Field(i).Name)
		}
	}
}

// TestServeHelpListsEveryOption: `ratebatch serve -h`, from the built
// binary, shows every option with its YAML key and environment variable,
// and its --policy help names every policy serve accepts.
func TestServeHelpListsEveryOption(t *testing.T) {
	out, _ := exec.Command(ratebatch(t), "serve", "-h").CombinedOutput()
	help := string(out)
	if !strings.Contains(help, "usage: ratebatch serve") {
		t.Fatalf("serve -h printed no usage:\n%s", help)
	}
	for _, o := range options(t) {
		if !strings.Contains(help, "\n  -"+o.flag+" ") && !strings.Contains(help, "\n  -"+o.flag+"\n") {
			t.Errorf("serve -h does not list --%s", o.flag)
			continue
		}
		if !strings.Contains(help, "(yaml "+o.yaml+", env "+o.env+")") {
			t.Errorf("serve -h does not give --%s's spellings (yaml %s, env %s)", o.flag, o.yaml, o.env)
		}
	}
	i := strings.Index(help, "\n  -policy ")
	if i < 0 {
		t.Fatal("serve -h has no --policy")
	}
	policyHelp, _, _ := strings.Cut(help[i+1:], "\n  -")
	for _, name := range config.Policies() {
		if !regexp.MustCompile(`[ ,:]` + regexp.QuoteMeta(name) + `[ ,]`).MatchString(policyHelp) {
			t.Errorf("serve -h's --policy help does not name %s: %s", name, policyHelp)
		}
	}
}

// TestReadmeSpellingsClaim: README says which options have all three
// spellings; the per-model overrides under `models:` have only YAML, and
// README must say so where it makes the claim.
func TestReadmeSpellingsClaim(t *testing.T) {
	sec := section(t, "../README.md", "## Configuration")
	if strings.Contains(sec, "every option has") && !strings.Contains(sec, "YAML only") {
		t.Error("README.md, Configuration: claims three spellings for every option without naming the YAML-only per-model overrides")
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// ratebatch builds ./cmd/ratebatch once per test binary, into a directory
// TestMain removes, and returns its path.
func ratebatch(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(scratch, "bin", "ratebatch")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/ratebatch")
		cmd.Dir = ".."
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/ratebatch: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

// scratch is the test binary's temporary directory (TestMain).
var scratch string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ratebatch-docs-")
	if err != nil {
		panic(err)
	}
	scratch = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// joulesRow matches a row of the simulated table of
// docs/results/latency-cost.md: policy, budget (budget rows), mean ms, p99
// ms, rows per batch, req/J, the gain in req/J over adhoc's (empty on
// adhoc's row).
var joulesRow = regexp.MustCompile("(?m)^\\| `([a-z+]+)`(?:, ([0-9.]+x))?[^|]* \\| ([0-9.]+) ms \\| ([0-9.]+) ms \\| ([0-9.]+) \\| ([0-9.]+) \\| ([+-][0-9.]+%)? ?\\|")

// latencyCostTable is the section of the simulated energy-for-latency
// table, the figures README's "Should I use it?" quotes.
const (
	latencyCostPage  = "results/latency-cost.md"
	latencyCostTable = "## In simulation: paper300 at ten times its rates"
)

// TestLatencyCostTableIsReproduced: every figure of the simulated table of
// docs/results/latency-cost.md is what the sim command it names prints
// now, rounded as the table rounds. It runs in every CI run (one
// simulation of 330,000 requests per budget the table names, seconds of
// CPU apiece, all at once and beside the package's other tests); -short
// skips it.
func TestLatencyCostTableIsReproduced(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates the table's rows")
	}
	t.Parallel()
	rows := joulesRow.FindAllStringSubmatch(section(t, latencyCostPage, latencyCostTable), -1)
	if len(rows) < 3 {
		t.Fatalf("%s's simulated table: %d rows found, want adhoc, the default and budget", latencyCostPage, len(rows))
	}
	var budgets []string
	for _, m := range rows {
		if !slices.Contains(budgets, m[2]) {
			budgets = append(budgets, m[2])
		}
	}
	sims := simLatencyCost(t, budgets)
	for _, m := range rows {
		name, budget := m[1], m[2]
		if name == "budget" && budget == "" {
			t.Errorf("%s's simulated table: a budget row without its budget: %s", latencyCostPage, m[0])
			continue
		}
		var got *simRow
		for _, r := range sims[budget] {
			if r.Policy == name {
				got = &r
			}
		}
		if got == nil {
			t.Errorf("%s's simulated table names %s, which sim did not print", latencyCostPage, name)
			continue
		}
		gain := ""
		if name != "adhoc" {
			adhoc := sims[budget][0]
			gain = fmt.Sprintf("%+.1f%%", 100*(got.PerJule/adhoc.PerJule-1))
		}
		want := []string{fmt.Sprintf("%.2f", got.Mean), fmt.Sprintf("%.1f", got.P99), fmt.Sprintf("%.2f", got.Batch), fmt.Sprintf("%.2f", got.PerJule), gain}
		if have := m[3:8]; !slices.Equal(have, want) {
			t.Errorf("%s's simulated table, %s %s: %q, but sim prints %q (mean ms, p99 ms, rows per batch, req/J, vs ad-hoc)", latencyCostPage, name, budget, have, want)
		}
	}
}

// simRow is one policy's row of `ratebatch sim --json`.
type simRow struct {
	Policy  string  `json:"policy"`
	Mean    float64 `json:"mean_latency_ms"`
	P99     float64 `json:"p99_latency_ms"`
	Batch   float64 `json:"mean_batch_size"`
	PerJule float64 `json:"requests_per_joule"`
}

// simLatencyCost runs the latency-cost table's sim command once per
// --latency-budget in budgets, all at once (each is one process on one
// core), and returns each one's rows, ad-hoc's first. The budget ""
// stands for the rows of the policies that take no budget: adhoc and
// batchmonitor+ alone, without the budget policy, whose default row has
// its own budget (1.10x) in the table.
func simLatencyCost(t *testing.T, budgets []string) map[string][]simRow {
	t.Helper()
	bin := ratebatch(t)
	out := make([][]byte, len(budgets))
	errs := make([]error, len(budgets))
	argv := make([][]string, len(budgets))
	var wg sync.WaitGroup
	for i, budget := range budgets {
		argv[i] = []string{"sim", "--policy", "adhoc,batchmonitor+,budget", "--trace", "paper300",
			"--preset", "googlenet-p4", "--trace-scale", "10", "--json"}
		if budget == "" {
			argv[i][2] = "adhoc,batchmonitor+"
		} else {
			argv[i] = append(argv[i], "--latency-budget", budget)
		}
		wg.Go(func() { out[i], errs[i] = exec.Command(bin, argv[i]...).Output() })
	}
	wg.Wait()
	sims := map[string][]simRow{}
	for i, budget := range budgets {
		var r []simRow
		if errs[i] == nil {
			errs[i] = json.Unmarshal(out[i], &r)
		}
		if errs[i] != nil {
			t.Fatalf("ratebatch %s: %v", strings.Join(argv[i], " "), errs[i])
		}
		sims[budget] = r
	}
	return sims
}

// TestSimulationTablesShowEveryPolicy: an output shown in docs/ after a
// `sim --policy all` command has a row for every built-in policy (the
// tables once showed four of nine).
func TestSimulationTablesShowEveryPolicy(t *testing.T) {
	checked := 0
	for _, doc := range coveredDocuments(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks := strings.Split(string(b), "```")
		// Fenced text alternates with prose: blocks[1], blocks[3], ... are
		// code, each starting with its language line.
		for i := 1; i+2 < len(blocks); i += 2 {
			cmd, out := blocks[i], blocks[i+2]
			if !strings.Contains(cmd, "sim --policy all") || strings.TrimSpace(blocks[i+1]) != "" {
				continue
			}
			checked++
			for _, name := range policy.Names() {
				if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `\s+\d`).MatchString(out) {
					t.Errorf("%s: the output shown after %q has no row for %s", doc, strings.TrimSpace(cmd), name)
				}
			}
		}
	}
	if checked < 3 {
		t.Fatalf("found %d sim --policy all outputs, want SIMULATION.md's three", checked)
	}
}
