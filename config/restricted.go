package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratebatch/ratebatch/door"
)

// RestrictedAPI is restricted_api: which of Triton's API categories the
// doors open to clients, as Triton's --http-restricted-api and
// --grpc-restricted-protocol say it. Each entry is
// "CATEGORY[,CATEGORY...]:KEY=VALUE" (open only to calls whose header KEY
// is VALUE; over gRPC the metadata key is Triton's,
// triton-grpc-protocol-KEY) or "CATEGORY[,CATEGORY...]" (closed to every
// client); a category no entry names is open. Package door owns the
// categories and reads the entries (door.ParseRules).
//
// In YAML it is a list of entries, or a map of a category to "open",
// "closed" or "KEY=VALUE"; in a flag or an environment variable, the
// entries joined by ";".
type RestrictedAPI []string

// UnmarshalYAML reads the list or the map form.
func (r *RestrictedAPI) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		*r = list
		return nil
	case yaml.MappingNode:
		var out RestrictedAPI
		for i := 0; i+1 < len(n.Content); i += 2 {
			cat, v := n.Content[i].Value, n.Content[i+1].Value
			switch {
			case v == "open":
			case v == "closed":
				out = append(out, cat)
			case strings.Contains(v, "="):
				out = append(out, cat+":"+v)
			default:
				return fmt.Errorf("%s: want open, closed or KEY=VALUE, got %q", cat, v)
			}
		}
		*r = out
		return nil
	case yaml.ScalarNode:
		return r.Set(n.Value)
	}
	return fmt.Errorf("wants a list of entries or a map of categories")
}

// Set reads the flag and environment form: entries joined by ";".
func (r *RestrictedAPI) Set(s string) error {
	*r = nil
	for e := range strings.SplitSeq(s, ";") {
		if e = strings.TrimSpace(e); e != "" {
			*r = append(*r, e)
		}
	}
	return nil
}

func (r RestrictedAPI) String() string { return strings.Join(r, ";") }

// Rules are the entries read (ParseRules); call it on a validated
// configuration.
func (r RestrictedAPI) Rules() (door.Rules, error) { return door.ParseRules(r) }

// redacted is r with each header's value masked: they are secrets.
func (r RestrictedAPI) redacted() RestrictedAPI {
	out := slices.Clone(r)
	for i, e := range out {
		if cats, setting, ok := strings.Cut(e, ":"); ok {
			if k, _, ok := strings.Cut(setting, "="); ok {
				out[i] = cats + ":" + k + "=REDACTED"
			}
		}
	}
	return out
}
