package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/door"
)

// restricted_api reads the same from every source: a YAML list of
// Triton's entries, a YAML map of categories, a flag and an environment
// variable of entries joined by ";"; a mistake names the field.
func TestRestrictedAPIEverySource(t *testing.T) {
	want := RestrictedAPI{"model-repository,shared-memory:admin-key=secret", "logging,trace"}
	for _, tc := range []struct {
		name string
		yaml string
		env  map[string]string
		args []string
		want RestrictedAPI
	}{
		{"yaml list", "restricted_api:\n  - model-repository,shared-memory:admin-key=secret\n  - logging,trace\n", nil, nil, want},
		{"yaml map", "restricted_api:\n  model-repository: admin-key=secret\n  shared-memory: admin-key=secret\n  logging: closed\n  trace: closed\n  inference: open\n", nil, nil,
			RestrictedAPI{"model-repository:admin-key=secret", "shared-memory:admin-key=secret", "logging", "trace"}},
		{"env", "", map[string]string{"RATEBATCH_RESTRICTED_API": "model-repository,shared-memory:admin-key=secret; logging,trace"}, nil, want},
		{"flag", "", nil, []string{"--restricted-api", "model-repository,shared-memory:admin-key=secret;logging,trace"}, want},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(Source{File: writeFile(t, "upstream: http://t:8000\n"+tc.yaml), LookupEnv: env(tc.env), Flags: flags(t, tc.args...)})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.RestrictedAPI, tc.want) {
				t.Fatalf("restricted_api = %q, want %q", c.RestrictedAPI, tc.want)
			}
			r, err := c.RestrictedAPI.Rules()
			if err != nil || r[door.ModelRepositoryAPI] != (door.Rule{Key: "admin-key", Value: "secret"}) || !r[door.LoggingAPI].Closed || r[door.InferenceAPI] != (door.Rule{}) {
				t.Fatalf("rules %+v, %v", r, err)
			}
		})
	}
	for _, bad := range []string{
		"restricted_api: [model-repo]\n",
		"restricted_api: [logging, 'trace,logging:k=v']\n",
		"restricted_api: {logging: shut}\n",
	} {
		_, err := Load(Source{File: writeFile(t, "upstream: http://t:8000\n"+bad)})
		if err == nil || !strings.Contains(err.Error(), "restricted_api") {
			t.Errorf("%q: %v, want an error naming restricted_api", bad, err)
		}
	}
}

// The header values are secrets: masked wherever the configuration is
// shown (Redacted, the status document); the running value is kept.
func TestRestrictedAPIRedacted(t *testing.T) {
	c := Default()
	c.RestrictedAPI = RestrictedAPI{"model-repository:admin-key=s3cret", "logging"}
	r := c.Redacted()
	if !slices.Equal(r.RestrictedAPI, RestrictedAPI{"model-repository:admin-key=REDACTED", "logging"}) || c.RestrictedAPI[0] != "model-repository:admin-key=s3cret" {
		t.Fatalf("redacted %q, original %q", r.RestrictedAPI, c.RestrictedAPI)
	}
	if s := fmt.Sprint(c.Document()["restricted_api"]); strings.Contains(s, "s3cret") || !strings.Contains(s, "REDACTED") {
		t.Fatalf("status document shows %s", s)
	}
}
