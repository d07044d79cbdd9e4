package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/ratebatch/ratebatch/policy"
)

// PolicyOptions is o as the policy section of the file spells it, by key
// (latency_budget, wait_bound, ...), for the admin endpoints that show the
// policy in force: every option the section has, whatever package policy
// declares.
func PolicyOptions(o policy.Options) map[string]any {
	return document(reflect.ValueOf(o)).(map[string]any)
}

// SetPolicyOption sets the option of o whose key in the policy section is
// key, from its spelling in the file or a flag ("1.10x", "2ms", "0.5"),
// as PUT /policy sets it at run time. Bounds are policy.Options.Validate's.
func SetPolicyOption(o *policy.Options, key, value string) error {
	fields := yamlFields(reflect.TypeOf(*o))
	for _, f := range fields {
		if f.name == key {
			if err := setField(reflect.ValueOf(o).Elem().FieldByIndex(f.index), value); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			return nil
		}
	}
	known := make([]string, len(fields))
	for i, f := range fields {
		known[i] = f.name
	}
	return fmt.Errorf("unknown policy option %q (known: %s)", key, strings.Join(known, ", "))
}
