package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// TestYAMLTypeErrorsNameFieldAndLine: a value of the wrong type is refused
// with its YAML path, its line and what the field wants, as README.md
// promises ("a bad value is refused at start with its field named").
func TestYAMLTypeErrorsNameFieldAndLine(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		field string
		line  int
		want  []string // substrings of the message
	}{
		{"integer", "upstream: http://u\nlimits:\n  queue_rows: lots\n", "limits.queue_rows", 3, []string{"line 3", "wants an integer", `"lots"`}},
		{"bare number duration", "upstream: http://u\npolicy:\n  window: 10\n", "policy.window", 3, []string{"write 10s"}},
		{"bad duration", "upstream: http://u\npolicy: {window: soon}\n", "policy.window", 2, []string{"wants a duration"}},
		{"size", "upstream: http://u\nlimits:\n  max_body_bytes: 64 megs\n", "limits.max_body_bytes", 3, []string{"line 3", "wants a size", "64MiB"}},
		{"float", "upstream: http://u\npolicy:\n  w2: heavy\n", "policy.w2", 3, []string{"wants a number"}},
		{"bool", "upstream: http://u\nadmin_pprof: perhaps\n", "admin_pprof", 2, []string{"wants true or false"}},
		{"mapping for scalar", "upstream: http://u\nlimits:\n  queue_rows: {a: 1}\n", "limits.queue_rows", 3, []string{"wants an integer, got a mapping"}},
		{"scalar for section", "upstream: http://u\nlimits: 5\n", "limits", 2, []string{"wants a mapping"}},
		{"model field", "upstream: http://u\nmodels:\n  m:\n    sla: 20\n", "models.m.sla", 4, []string{"write 20s"}},
		{"unknown key", "upstream: http://u\npolicy:\n  windw: 1s\n", "policy.windw", 3, []string{"unknown key", "window"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, tt.yaml)
			_, err := Load(Source{File: file})
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a FieldError", err)
			}
			if fe.Field != tt.field || fe.Line != tt.line || fe.File != file {
				t.Errorf("field %q line %d file %q, want %q line %d %q (err %v)", fe.Field, fe.Line, fe.File, tt.field, tt.line, file, err)
			}
			for _, w := range append(tt.want, tt.field) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestYAMLValuesStillDecode: the walker reads everything yaml.Decode did.
func TestYAMLValuesStillDecode(t *testing.T) {
	c, err := Load(Source{File: writeFile(t, `
upstream: http://u
admin_pprof: true
policy: {name: smdp, window: 250ms, w1: 1, w2: 0.5}
limits: {max_body_bytes: 1048576, queue_rows: 7}
models:
  a: {policy: adhoc, max_batch_size: 4, sla: 20ms}
  b:
`)})
	if err != nil {
		t.Fatal(err)
	}
	if !c.AdminPprof || c.Policy.Name != "smdp" || c.Policy.Window.Milliseconds() != 250 || policy.OptionsOf[policy.SMDPOptions](c.Policy.Options).W2 != 0.5 ||
		c.Limits.MaxBodyBytes != 1<<20 || c.Limits.QueueRows != 7 ||
		c.Models["a"].MaxBatchSize != 4 || c.Models["a"].SLA.Milliseconds() != 20 || c.Models["a"].Policy != "adhoc" {
		t.Fatalf("decoded %+v", c)
	}
	if _, ok := c.Models["b"]; !ok {
		t.Error("model b with no settings was dropped")
	}
}

// TestProfileCSVCheckedAtLoad: a missing or unusable profile is refused at
// start with its field named, and a relative path is read against the config
// file's directory.
func TestProfileCSVCheckedAtLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("good.csv", "batch_size,latency_ms\n1,1.5\n2,2.0\n4,3.0\n")
	write("bad.csv", "size,ms\n1,x\n")
	write("cfg.yaml", "upstream: http://u\nmodels:\n  m: {profile_csv: good.csv}\n")
	write("missing.yaml", "upstream: http://u\nmodels:\n  m: {profile_csv: nowhere.csv}\n")
	write("bad.yaml", "upstream: http://u\nmodels:\n  m: {profile_csv: bad.csv}\n")

	// Run from elsewhere, so a path read against the working directory fails.
	t.Chdir(t.TempDir())
	c, err := Load(Source{File: filepath.Join(dir, "cfg.yaml")})
	if err != nil {
		t.Fatalf("relative profile next to the config: %v", err)
	}
	if got, want := c.Models["m"].ProfileCSV, filepath.Join(dir, "good.csv"); got != want {
		t.Errorf("profile_csv = %q, want %q (resolved against the config file)", got, want)
	}
	for _, f := range []string{"missing.yaml", "bad.yaml"} {
		_, err := Load(Source{File: filepath.Join(dir, f)})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "models.m.profile_csv" {
			t.Errorf("%s: err = %v, want a FieldError on models.m.profile_csv", f, err)
		}
	}
}

// TestDocumentSpellsYAML: the status endpoint shows the configuration with
// YAML names and human durations and sizes, and no secret.
func TestDocumentSpellsYAML(t *testing.T) {
	c := Default()
	c.Upstream = "http://user:pw@u:8000"
	c.AdminToken = "s3cret"
	c.Models = map[string]Model{"m": {SLA: 20 * time.Millisecond, ProfileCSV: "p.csv"}}
	data, err := json.Marshal(c.Document())
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	for _, want := range []string{`"window":"1s"`, `"max_body_bytes":"64MiB"`, `"queue_rows":4096`,
		`"admin_token":"REDACTED"`, `"sla":"20ms"`, `"profile_csv":"p.csv"`, `"discovery_interval":"30s"`} {
		if !strings.Contains(got, want) {
			t.Errorf("document lacks %s: %s", want, got)
		}
	}
	for _, bad := range []string{"Window", "1000000000", "s3cret", ":pw@"} {
		if strings.Contains(got, bad) {
			t.Errorf("document shows %q: %s", bad, got)
		}
	}
}

// TestYAMLReportsEveryError: a file with several mistakes names all of
// them in one error, each with its field and line (the file's type errors,
// its unknown keys and the values validation refuses), in file order.
func TestYAMLReportsEveryError(t *testing.T) {
	file := writeFile(t, `upstream: http://u
limits:
  queue_rows: lots
  max_body_bytes: 64 megs
policy:
  windw: 1s
  name: fastest
models:
  m:
    sla: 20
    max_batch_size: -1
log:
  level: loud
`)
	_, err := Load(Source{File: file})
	if err == nil {
		t.Fatal("a file with six mistakes loaded")
	}
	want := []struct {
		field string
		line  int // 0: found by validation, which knows no lines
	}{
		{"limits.queue_rows", 3}, {"limits.max_body_bytes", 4}, {"policy.windw", 6},
		{"models.m.sla", 10}, {"policy.name", 0}, {"log.level", 0}, {"models.m.max_batch_size", 0},
	}
	var got []*FieldError
	for _, e := range leaves(err) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a FieldError", e)
		}
		got = append(got, fe)
	}
	if len(got) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		if got[i].Field != w.field || got[i].Line != w.line {
			t.Errorf("error %d: %s line %d, want %s line %d", i, got[i].Field, got[i].Line, w.field, w.line)
		}
		if w.line > 0 && got[i].File != file {
			t.Errorf("error %d names file %q, want %q", i, got[i].File, file)
		}
	}
	if lines := strings.Count(err.Error(), "\n") + 1; lines != len(want) {
		t.Errorf("the message has %d lines, want one per mistake:\n%v", lines, err)
	}
}

// A file that is not YAML gives one error, with its line, and not also the
// required keys it would have set ("upstream: is required").
func TestYAMLSyntaxErrorIsTheOnlyError(t *testing.T) {
	for _, body := range []string{
		"upstream: http://u\nlimits:\n  queue_rows: 10\n    max_body_bytes: 1MiB\n",
		"upstream: http://u\n  listen: :9000\n",
		"upstream: \"http://u\n",
	} {
		file := writeFile(t, body)
		_, err := Load(Source{File: file})
		if err == nil {
			t.Errorf("%q loaded", body)
			continue
		}
		msg := err.Error()
		if n := len(leaves(err)); n != 1 || strings.Contains(msg, "required") {
			t.Errorf("%q: %d errors, want one, without a required key:\n%v", body, n, msg)
		}
		if !strings.Contains(msg, file) || !strings.Contains(msg, "line ") {
			t.Errorf("%q: %q does not name the file and its line", body, msg)
		}
	}
	// The environment's and the flags' mistakes are still named beside it.
	file := writeFile(t, "upstream: http://u\n  listen: :9000\n")
	env := map[string]string{"RATEBATCH_LIMITS_QUEUE_ROWS": "lots"}
	_, err := Load(Source{File: file, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err == nil || len(leaves(err)) != 2 || !strings.Contains(err.Error(), "RATEBATCH_LIMITS_QUEUE_ROWS") {
		t.Errorf("a syntax error and a bad variable: %v", err)
	}
}

// A file that is not YAML is refused with its line and what is wrong in
// plain words, the parser's own text kept after them; a tab in an
// indentation is named wherever the parser noticed it.
func TestYAMLSyntaxErrorsInPlainWords(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"a tab", "upstream: http://u\npolicy:\n\tname: budget\n", 3, "YAML indents with spaces, line 3 has a tab"},
		{"a tab the parser reports a line early", "upstream: http://u\npolicy:\n  name: budget\n\twindow: 1s\n", 4,
			"YAML indents with spaces, line 4 has a tab"},
		{"a key on a value's line", "upstream: http://u\npolicy: name: budget\n", 2, "a 'key:' where only a value can be"},
		{"a key indented under a value", "upstream: http://u\npolicy:\n  name: budget\n   window: 1s\n", 4, "indent a key as deep as the keys beside it"},
		{"no space after a colon", "upstream:http://u\nlisten: x\n", 2, "put a space after each key's colon"},
		{"a key dedented to no section's column", "upstream: http://u\npolicy:\n  name: budget\n window: 1s\n", 3,
			"a line indented to a column no key of its section uses"},
		{"an open quote", "upstream: http://u\npolicy:\n  name: 'budget\n", 3, "never closed"},
		{"an open bracket", "upstream: http://u\npolicy:\n  name: [budget\n", 2, "never closed"},
		{"a reserved character", "upstream: http://u\nlisten: @x\n", 2, "quote the value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, tc.yaml)
			_, err := Load(Source{File: file})
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if where := fmt.Sprintf("config: %s line %d: ", file, tc.line); !strings.HasPrefix(msg, where) || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q\nwant it to start %q and say %q", msg, where, tc.want)
			}
			if !strings.Contains(msg, "(YAML parser: ") || strings.Count(msg, "config:") != 1 {
				t.Errorf("error %q: want the parser's words after the plain ones, and one config: prefix", msg)
			}
		})
	}
}

// An unknown key says where it belongs when it is a key of another
// section (most often one dedented out of policy:), and else the key it
// is nearest to, in its section or elsewhere.
func TestYAMLUnknownKeysSayWhereTheyBelong(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, field string
		line              int
		want              string
	}{
		{"dedented out of policy", "upstream: http://u\npolicy:\n  name: budget\nlatency_budget: 1.2x\n", "latency_budget", 4,
			"unknown key here: it belongs under policy: or under models.NAME:, not at the top level (no indent)"},
		{"a top-level key indented", "policy:\n  name: budget\n  upstream: http://u\n", "policy.upstream", 3,
			"unknown key here: it belongs at the top level (no indent), not under policy:"},
		{"in the wrong section", "upstream: http://u\nlimits:\n  hold: 2s\n", "limits.hold", 3,
			"unknown key here: it belongs under upstream_client:, not under limits:"},
		{"a near miss", "upstream: http://u\npolicy:\n  latency_budgt: 1.2x\n", "policy.latency_budgt", 3,
			"unknown key; did you mean latency_budget?"},
		{"a near miss of a model key", "upstream: http://u\nmodels:\n  m:\n    max_batch: 4\n", "models.m.max_batch", 4,
			"unknown key; did you mean max_batch_size?"},
		{"a near miss of another section's key", "upstream: http://u\nretrys: 2\n", "retrys", 2,
			"unknown key; did you mean retries, which belongs under upstream_client:?"},
		{"nothing like it", "upstream: http://u\nlimits:\n  frobnicate: 1\n", "limits.frobnicate", 3,
			"unknown key; under limits: the keys are "}, // then every key of limits:, sorted
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(Source{File: writeFile(t, tc.yaml)})
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Line != tc.line || !strings.HasPrefix(fe.Msg, tc.want) {
				t.Errorf("error %v\nwant %s line %d: %s", err, tc.field, tc.line, tc.want)
			}
		})
	}
}
