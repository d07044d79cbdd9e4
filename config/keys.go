package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/ratebatch/ratebatch/internal/suggest"
)

// homes maps every key of the configuration file to the sections it
// belongs in, by YAML path: "" for the top level, "policy",
// "models.NAME" for a model's own keys. An unknown key that is a known
// key of another section was most often indented under the wrong one (a
// key dedented out of policy:), and the error says where it belongs.
// (Made when asked: the policy section's keys are the registered
// policies'.)
func homes() map[string][]string {
	m := map[string][]string{}
	addHomes(reflect.TypeFor[Config](), "", m)
	return m
}

func addHomes(t reflect.Type, path string, m map[string][]string) {
	for _, f := range yamlFields(t) {
		m[f.name] = append(m[f.name], path)
		switch ft := f.field.Type; {
		case ft.Kind() == reflect.Struct && ft != durationType:
			addHomes(ft, join(path, f.name), m)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			addHomes(ft.Elem(), join(path, f.name)+".NAME", m)
		}
	}
}

// section is path as homes names it: a model's section is models.NAME,
// whatever the model.
func section(path string) string {
	if rest, ok := strings.CutPrefix(path, "models."); ok && !strings.Contains(rest, ".") {
		return "models.NAME"
	}
	return path
}

// under says where a key of the section at path goes, as the file shows
// it.
func under(path string) string {
	if path == "" {
		return "at the top level (no indent)"
	}
	return "under " + path + ":"
}

// unknownKey says what is wrong with key in the section at path, whose
// keys are known: where it belongs when it is a key of other sections,
// else the known key it is nearest to (suggest.Closest, as the command
// line's flags), else the keys the section has.
func unknownKey(key, path string, known []string) string {
	homes := homes()
	var elsewhere []string
	for _, home := range homes[key] {
		if home != section(path) {
			elsewhere = append(elsewhere, under(home))
		}
	}
	if len(elsewhere) > 0 {
		return fmt.Sprintf("unknown key here: it belongs %s, not %s", strings.Join(elsewhere, " or "), under(path))
	}
	if near := suggest.Closest(key, known); near != "" {
		return fmt.Sprintf("unknown key; did you mean %s?", near)
	}
	if near := suggest.Closest(key, slices.Sorted(maps.Keys(homes))); near != "" {
		return fmt.Sprintf("unknown key; did you mean %s, which belongs %s?", near, under(homes[near][0]))
	}
	return fmt.Sprintf("unknown key; %s the keys are %s", under(path), strings.Join(known, ", "))
}
