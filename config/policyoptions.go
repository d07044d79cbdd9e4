package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ratebatch/ratebatch/policy"
)

// The policy section's options are whatever package policy registers
// (policy.Register): no list of them is kept here. The section sees
// policy.Options through its view, a struct made at run time with one
// field per registered options type, each inlined, so that the walkers of
// this package (yamlFields, fieldAt, setAt) read and set a policy's option
// by its key as they do every other option, a key shared by several
// policies (wait_bound) included.

// optionsType is policy.Options, which the walkers see as its view.
var optionsType = reflect.TypeFor[policy.Options]()

// optionsView is the struct the walkers see for policy.Options: field i
// is the i-th of policy.OptionTypes, inlined.
func optionsView() reflect.Type {
	types := policy.OptionTypes()
	fields := make([]reflect.StructField, len(types))
	for i, t := range types {
		fields[i] = reflect.StructField{Name: "P" + strconv.Itoa(i), Type: t, Tag: `yaml:",inline"`}
	}
	return reflect.StructOf(fields)
}

// viewOf is o as its view, addressable: each registered policy's options.
func viewOf(o policy.Options) reflect.Value {
	v := reflect.New(optionsView()).Elem()
	for i, p := range o.Parts() {
		v.Field(i).Set(reflect.ValueOf(p))
	}
	return v
}

// optionsOf is the Options a view holds (viewOf's inverse).
func optionsOf(view reflect.Value) policy.Options {
	parts := make([]any, view.NumField())
	for i := range parts {
		parts[i] = view.Field(i).Interface()
	}
	return policy.NewOptions(parts...)
}

// PolicyOptions is o as the policy section of the file spells it, by key
// (latency_budget, wait_bound, ...): every option the section has,
// whatever package policy declares.
func PolicyOptions(o policy.Options) map[string]any {
	return document(reflect.ValueOf(o)).(map[string]any)
}

// PolicyOptionsOf is the options the named policy takes, as the policy
// section spells them, with the defaults their zero values stand for
// (policy.Effective: latency_budget 1.10x, not ""), for the admin
// endpoints that show the policy in force; none for a name no policy is
// registered under (passthrough).
func PolicyOptionsOf(name string, o policy.Options) map[string]any {
	own, ok := policy.Effective(name, o)
	if !ok {
		return map[string]any{}
	}
	return document(reflect.ValueOf(own)).(map[string]any)
}

// SetPolicyOption sets the option of o whose key in the policy section is
// key, from its spelling in the file or a flag ("1.10x", "2ms", "0.5"),
// as PUT /policy sets it at run time: in every policy's options that have
// the key. Bounds are each policy's options' Validate.
func SetPolicyOption(o *policy.Options, key, value string) error {
	fields := yamlFields(optionsType)
	for _, f := range fields {
		if f.name == key {
			err := setCopies(reflect.ValueOf(o).Elem(), f.index, f.copies, func(v reflect.Value) error { return setField(v, value) })
			if err != nil {
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

// PolicyTakes says whether the named policy has the option key among its
// own options (policy.OptionsType): a key set for a policy without it is
// a mistake said at once, not an option ignored. The error names the
// policies that take the key. An unknown policy or key is policy.New's and
// SetPolicyOption's to report: PolicyTakes passes them.
func PolicyTakes(name, key string) error {
	if _, known := policy.OptionsType(name); !known || slices.Contains(policyKeys(name), key) {
		return nil
	}
	var takers []string
	for _, n := range policy.Names() {
		if slices.Contains(policyKeys(n), key) {
			takers = append(takers, n)
		}
	}
	switch len(takers) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf(`%s applies to the %s policy: {"policy": "%s", "%s": ...}`, key, takers[0], takers[0], key)
	}
	return fmt.Errorf("%s applies to the %s policies, not to %s", key, strings.Join(takers, ", "), name)
}

// policyKeys are the keys of the named policy's own options; none for a
// policy that is not registered.
func policyKeys(name string) []string {
	own, ok := policy.OptionsType(name)
	if !ok {
		return nil
	}
	var keys []string
	for _, f := range yamlFields(own) {
		keys = append(keys, f.name)
	}
	return keys
}

// OwnOptions are the options of o the named policy takes that are set
// (not their zero value, which is each option's documented default),
// spelt as PUT /policy takes them: what a person reads as the setting in
// force, and what puts it back.
func OwnOptions(name string, o policy.Options) map[string]string {
	doc := PolicyOptions(o)
	out := map[string]string{}
	for _, k := range policyKeys(name) {
		switch v := doc[k].(type) {
		case nil, bool:
			if v == true {
				out[k] = "true"
			}
		case string:
			if v != "" && v != "0s" {
				out[k] = v
			}
		default:
			if s := fmt.Sprint(v); s != "0" {
				out[k] = s
			}
		}
	}
	return out
}
