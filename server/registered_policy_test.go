package server_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// testpolicy is a policy added as docs/ARCHITECTURE.md's "Extending" says
// a policy is added: its options, their Validate, its Register call and
// its Rule, in one file (this one), and nothing else edited. It sends
// whatever waits, and counts its rule's decisions by its option.
const testPolicy = "testpolicy"

// knobOptions are testpolicy's options: the key test_knob, and the shared
// wait_bound.
type knobOptions struct {
	Knob               int `yaml:"test_knob" help:"testpolicy: a knob its rule counts its decisions by"`
	policy.HoldOptions `yaml:",inline"`
}

func (o knobOptions) Validate() error {
	if o.Knob < 0 || o.Knob >= len(knobDecisions) {
		return &policy.ParamError{Param: "test_knob", Msg: fmt.Sprintf("must be in [0, %d), got %d", len(knobDecisions), o.Knob)}
	}
	return o.HoldOptions.Validate()
}

// knobDecisions counts testpolicy's decisions by the test_knob of the rule
// that made them.
var knobDecisions [16]atomic.Int64

func init() {
	policy.Register(testPolicy, func(o knobOptions) (policy.Policy, error) { return knobPolicy{knob: o.Knob}, nil })
}

type knobPolicy struct{ knob int }

func (knobPolicy) Name() string                       { return testPolicy }
func (p knobPolicy) Plan(policy.Estimate) policy.Rule { return knobRule(p) }

type knobRule struct{ knob int }

func (r knobRule) Decide(q policy.Queue) policy.Decision {
	knobDecisions[r.knob].Add(1)
	return policy.Fill{Policy: testPolicy}.Decide(q)
}

func (r knobRule) Status() policy.Status {
	return policy.Status{Policy: testPolicy, Note: fmt.Sprintf("test_knob %d", r.knob)}
}

// A policy registered in a test file works end to end: its option loads
// from the file, the environment and a flag under the policy section's
// spellings (and is listed with them, as serve -h and docs/CONFIG.md list
// it), is validated, shows in GET /policy, is set by PUT /policy, and the
// rule built from it decides in the dispatcher.
func TestPolicyRegisteredInATestWorksEndToEnd(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	file := filepath.Join(t.TempDir(), "ratebatch.yaml")
	load := func(yaml string, env map[string]string, args ...string) (*config.Config, error) {
		t.Helper()
		if err := os.WriteFile(file, []byte("upstream: http://"+em.Addr()+"\n"+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		config.BindFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		return config.Load(config.Source{File: file, LookupEnv: lookup, Flags: fs})
	}
	knob := func(c *config.Config) int { return policy.OptionsOf[knobOptions](c.Policy.Options).Knob }

	// The file, then the environment, then a flag.
	yaml := "policy: {name: testpolicy, test_knob: 3, wait_bound: 2ms}\n"
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want int
	}{
		{nil, nil, 3},
		{map[string]string{"RATEBATCH_POLICY_TEST_KNOB": "4"}, nil, 4},
		{map[string]string{"RATEBATCH_POLICY_TEST_KNOB": "4"}, []string{"--policy-test-knob", "5"}, 5},
	} {
		c, err := load(yaml, tc.env, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		if knob(c) != tc.want || policy.OptionsOf[knobOptions](c.Policy.Options).MaxWait != 2*time.Millisecond {
			t.Errorf("env %v, flags %v: options %+v, want test_knob %d and wait_bound 2ms", tc.env, tc.args, policy.OptionsOf[knobOptions](c.Policy.Options), tc.want)
		}
	}
	// Validated as every registered policy's options are.
	_, err := load("policy: {test_knob: 99}\n", nil)
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "policy.test_knob" {
		t.Errorf("test_knob 99: error %v, want one naming policy.test_knob", err)
	}
	// Listed with its three spellings, as serve -h and CONFIG.md's rows are.
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	config.BindFlags(fs)
	if f := fs.Lookup("policy-test-knob"); f == nil || !strings.HasSuffix(f.Usage, "(yaml policy.test_knob, env RATEBATCH_POLICY_TEST_KNOB)") {
		t.Errorf("serve's flags: --policy-test-knob is %+v", f)
	}
	if f := fs.Lookup("policy"); f == nil || !strings.Contains(f.Usage, testPolicy+",") {
		t.Errorf("--policy's help does not name %s: %+v", testPolicy, f)
	}
	if !strings.Contains(config.Markdown(), "| `policy.test_knob` | `--policy-test-knob` | `RATEBATCH_POLICY_TEST_KNOB` | `0` | testpolicy: ") {
		t.Error("docs/CONFIG.md's generated table has no row for policy.test_knob")
	}

	// Served: the rule runs in the dispatcher, GET /policy shows the
	// option, PUT /policy sets it.
	loaded, err := load(yaml, nil, "--policy-test-knob", "5")
	if err != nil {
		t.Fatal(err)
	}
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.Policy.Name, c.Policy.Options = loaded.Policy.Name, loaded.Policy.Options })
	decides := func(k int) {
		t.Helper()
		before := knobDecisions[k].Load()
		if code, r, _ := post(t, p.Base+"/v2/models/simple/infer", simpleBody("k", k, 1)); code != http.StatusOK || checkSimple(r, "k", k, 1) != nil {
			t.Fatalf("inference under testpolicy: %d %+v", code, r)
		}
		testpoll.Until(t, fmt.Sprintf("testpolicy's rule with test_knob %d to decide", k), func() bool { return knobDecisions[k].Load() > before })
	}
	inForce := func() (string, map[string]any) {
		t.Helper()
		var doc struct {
			Models []struct {
				Model   string         `json:"model"`
				Policy  string         `json:"policy"`
				Options map[string]any `json:"options"`
			} `json:"models"`
		}
		_, body := getText(t, p.Admin+"/policy")
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatal(err)
		}
		for _, m := range doc.Models {
			if m.Model == "simple" {
				return m.Policy, m.Options
			}
		}
		t.Fatalf("GET /policy has no model simple: %s", body)
		return "", nil
	}
	decides(5)
	if name, opts := inForce(); name != testPolicy || fmt.Sprint(opts) != "map[test_knob:5 wait_bound:2ms]" {
		t.Errorf("GET /policy: %s %v, want testpolicy with test_knob 5 and wait_bound 2ms", name, opts)
	}
	put := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, p.Admin+"/policy", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer test-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := put(`{"policy":"testpolicy","test_knob":7}`); code != http.StatusOK {
		t.Fatalf("PUT /policy test_knob 7: %d %s", code, body)
	}
	if _, opts := inForce(); fmt.Sprint(opts["test_knob"]) != "7" {
		t.Errorf("after PUT /policy test_knob 7: options %v", opts)
	}
	decides(7)
	// The key is testpolicy's: refused for another policy, and out of
	// bounds refused by its Validate.
	if code, body := put(`{"policy":"budget","test_knob":7}`); code != http.StatusBadRequest || !strings.Contains(body, "test_knob applies to the testpolicy policy") {
		t.Errorf("PUT /policy budget with test_knob: %d %s", code, body)
	}
	if code, body := put(`{"policy":"testpolicy","test_knob":99}`); code != http.StatusBadRequest || !strings.Contains(body, "test_knob") {
		t.Errorf("PUT /policy test_knob 99: %d %s", code, body)
	}
}
