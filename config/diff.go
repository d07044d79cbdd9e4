package config

import (
	"maps"
	"reflect"
	"slices"
)

// Changed lists what differs between two configurations, by YAML path:
// each scalar option ("policy.latency_budget"), and each model of the
// models: section as "models.NAME". A reload uses it to say which of the
// changes it applies and which wait for a restart.
func Changed(old, new *Config) []string {
	var out []string
	ov, nv := reflect.ValueOf(old).Elem(), reflect.ValueOf(new).Elem()
	for _, o := range options() {
		// Every copy of a shared key (yamlField): a configuration built in
		// Go may set one only.
		for _, idx := range append([][]int{o.index}, o.copies...) {
			if !reflect.DeepEqual(fieldAt(ov, idx).Interface(), fieldAt(nv, idx).Interface()) {
				out = append(out, o.path)
				break
			}
		}
	}
	names := slices.Sorted(maps.Keys(old.Models))
	for name := range new.Models {
		if _, ok := old.Models[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if !reflect.DeepEqual(old.Models[name], new.Models[name]) {
			out = append(out, "models."+name)
		}
	}
	return out
}

// Keep sets the options at paths (as Changed names them; models. paths
// are skipped) of c to their values in from: a reload keeps the running
// values of what it cannot change.
func (c *Config) Keep(from *Config, paths []string) {
	cv, fv := reflect.ValueOf(c).Elem(), reflect.ValueOf(from).Elem()
	for _, o := range options() {
		if slices.Contains(paths, o.path) {
			for _, idx := range append([][]int{o.index}, o.copies...) {
				setAt(cv, idx, func(f reflect.Value) error { f.Set(fieldAt(fv, idx)); return nil })
			}
		}
	}
}
