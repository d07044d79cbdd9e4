package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratebatch/ratebatch/policy"
)

// decodeYAML applies a YAML document to cfg. It walks the document's nodes
// beside Config's fields instead of letting yaml.Decode fill the struct, so
// that every mistake is reported as the README promises: by the field's YAML
// path, its line, and what the field wants ("limits.queue_rows: line 3: wants
// an integer, got \"lots\""), not as yaml's "cannot unmarshal !!str into int",
// and every mistake of the file at once (errors.Join), not only the first.
func decodeYAML(data []byte, cfg *Config) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	// An empty file decodes to io.EOF: it means "no overrides".
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return plainSyntax(data, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	return decodeNode(doc.Content[0], reflect.ValueOf(cfg).Elem(), "")
}

// syntaxError is a file that is not YAML (a bad indentation, an unclosed
// quote): none of it was read, so Load does not go on to validate the
// configuration, whose required keys would be missing only because the
// file could not be read. It says what is wrong in plain words, at its
// line (plainSyntax), and keeps the parser's own words after them.
type syntaxError struct {
	err  error
	file string
	line int
	msg  string
}

func (e *syntaxError) Error() string {
	where := "config: "
	if e.file != "" {
		where += e.file + " "
	}
	if e.line > 0 {
		where += fmt.Sprintf("line %d: ", e.line)
	}
	return where + e.msg + " (YAML parser: " + strings.TrimPrefix(yamlLine.ReplaceAllString(e.err.Error(), ""), "yaml: ") + ")"
}

func (e *syntaxError) Unwrap() error { return e.err }

// yamlLine is the "yaml: line N: " that starts the parser's errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// plainSyntax says what a YAML parser error means in the words of someone
// editing the file: a tab in an indentation (YAML indents with spaces
// only) wherever the parser noticed it, a key indented where a value was,
// a section dedented to a column no key uses, a quote or bracket left
// open; the parser's own text otherwise.
func plainSyntax(data []byte, err error) *syntaxError {
	e := &syntaxError{err: err, msg: "the file is not valid YAML"}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		e.line, _ = strconv.Atoi(m[1])
	}
	for i, line := range strings.Split(string(data), "\n") {
		if indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]; strings.Contains(indent, "\t") {
			e.line = i + 1
			e.msg = fmt.Sprintf("YAML indents with spaces, line %d has a tab: replace it with spaces", e.line)
			return e
		}
	}
	raw := err.Error()
	switch {
	case strings.Contains(raw, "mapping values are not allowed"):
		e.msg = "a 'key:' where only a value can be: indent a key as deep as the keys beside it " +
			"(not under a key that already has a value on its line), put a space after each key's colon, " +
			"and quote a value that contains ': '"
	case strings.Contains(raw, "did not find expected key"):
		e.msg = "a line indented to a column no key of its section uses, or a list item ('- ') among keys: " +
			"line the keys of a section up under each other"
	case strings.Contains(raw, "unexpected end of stream"), strings.Contains(raw, "did not find expected ',' or"):
		e.msg = "a quote, [ or { opened at or after this line is never closed"
	case strings.Contains(raw, "could not find expected ':'"):
		e.msg = "a key without its ':', or a value running on over lines: write key: value"
	case strings.Contains(raw, "found character that cannot start any token"):
		e.msg = "a value starts with a character YAML reserves (@ or `): quote the value"
	}
	return e
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	bytesType    = reflect.TypeFor[Bytes]()
	// unmarshalerType: a type that reads itself (other than Bytes, which
	// the walker parses as a scalar) is left to yaml.
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

// decodeNode sets v from n; path is v's YAML path ("" for the document).
func decodeNode(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // "key:" with no value keeps the default
	}
	t := v.Type()
	switch {
	case t == durationType || t == bytesType:
	case reflect.PointerTo(t).Implements(unmarshalerType):
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return nodeErr(n, path, "%v", err)
		}
		return nil
	case t.Kind() == reflect.Struct:
		return decodeStruct(n, v, path)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		return decodeMap(n, v, path)
	case t.Kind() == reflect.String || t.Kind() == reflect.Int || t.Kind() == reflect.Float64 || t.Kind() == reflect.Bool:
	default:
		// A type this walker does not know (a list, a custom unmarshaler):
		// yaml decodes it; the error still gets the field and line.
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return nodeErr(n, path, "%v", err)
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return nodeErr(n, path, "wants %s, got a %s", want(t), kindName(n.Kind))
	}
	if err := setScalar(v, n); err != nil {
		return nodeErr(n, path, "%v", err)
	}
	return nil
}

// yamlField is a struct field as the YAML file sees it: the fields of a
// struct embedded with `yaml:",inline"` (config.Policy's policy.Options,
// seen as its view: each registered policy's options) are the outer
// struct's own keys. A key that several inlined structs declare
// (wait_bound, in each policy that holds partial batches) is one key: its
// first field, and copies kept equal to it (set).
type yamlField struct {
	name   string
	index  []int   // reflect field index path from the outer struct
	copies [][]int // the same key's other fields, from the outer struct
	field  reflect.StructField
}

// yamlFields lists t's YAML keys in declaration order, each once; fields
// without a name or tagged "-" are not keys. A key declared twice with two
// types is a programming error, and panics.
func yamlFields(t reflect.Type) []yamlField {
	if t == optionsType {
		t = optionsView()
	}
	var out []yamlField
	at := map[string]int{}
	add := func(f yamlField) {
		i, dup := at[f.name]
		if !dup {
			at[f.name] = len(out)
			out = append(out, f)
			return
		}
		if out[i].field.Type != f.field.Type {
			panic(fmt.Sprintf("config: key %s of %v is a %v and a %v", f.name, t, out[i].field.Type, f.field.Type))
		}
		out[i].copies = append(out[i].copies, f.index)
		out[i].copies = append(out[i].copies, f.copies...)
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opts == "inline" && f.Type.Kind() == reflect.Struct {
			for _, in := range yamlFields(f.Type) {
				in.index = append([]int{i}, in.index...)
				for j, c := range in.copies {
					in.copies[j] = append([]int{i}, c...)
				}
				add(in)
			}
			continue
		}
		if name != "" && name != "-" && f.IsExported() {
			add(yamlField{name: name, index: []int{i}, field: f})
		}
	}
	return out
}

// setCopies sets the field of v at index with set, then its copies to the
// same value (what set kept of a bad value too: one key, one value).
func setCopies(v reflect.Value, index []int, copies [][]int, set func(reflect.Value) error) error {
	err := setAt(v, index, set)
	val := fieldAt(v, index)
	for _, c := range copies {
		setAt(v, c, func(f reflect.Value) error { f.Set(val); return nil })
	}
	return err
}

// fieldAt is the field of v at index, a yamlField's path, as
// reflect.Value.FieldByIndex finds it, but also through a policy.Options
// on the way (the path goes on in its view, optionsView): a copy then,
// not to be set (setAt sets).
func fieldAt(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if v.Type() == optionsType {
			return fieldAt(viewOf(v.Interface().(policy.Options)), index[i:])
		}
		v = v.Field(x)
	}
	return v
}

// setAt calls set with the field of v (addressable) at index, as fieldAt
// finds it; through a policy.Options the field is set in its view, which
// then replaces the Options.
func setAt(v reflect.Value, index []int, set func(reflect.Value) error) error {
	for i, x := range index {
		if v.Type() == optionsType {
			view := viewOf(v.Interface().(policy.Options))
			err := setAt(view, index[i:], set)
			v.Set(reflect.ValueOf(optionsOf(view)))
			return err
		}
		v = v.Field(x)
	}
	return set(v)
}

func decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		return nodeErr(n, path, "wants a mapping of keys, got %s", describe(n))
	}
	fields := map[string]yamlField{}
	var names []string
	for _, f := range yamlFields(v.Type()) {
		fields[f.name] = f
		names = append(names, f.name)
	}
	slices.Sort(names)
	// Every key is read even after a bad one, so that one run reports all
	// of a file's mistakes.
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		f, ok := fields[k.Value]
		if !ok {
			errs = append(errs, nodeErr(k, join(path, k.Value), "%s", unknownKey(k.Value, path, names)))
			continue
		}
		err := setCopies(v, f.index, f.copies, func(fv reflect.Value) error { return decodeNode(val, fv, join(path, k.Value)) })
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func decodeMap(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		return nodeErr(n, path, "wants a mapping of names, got %s", describe(n))
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		elem := reflect.New(v.Type().Elem()).Elem()
		if old := v.MapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key())); old.IsValid() {
			elem.Set(old)
		}
		if err := decodeNode(val, elem, join(path, k.Value)); err != nil {
			errs = append(errs, err) // and keep what did decode, for validation
		}
		v.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), elem)
	}
	return errors.Join(errs...)
}

// setScalar parses a YAML scalar into v. Durations get a hint when written
// as a bare number, since YAML reads `window: 10` as the integer 10 and Go
// durations need a unit.
func setScalar(v reflect.Value, n *yaml.Node) error {
	s := n.Value
	if v.Type() == durationType {
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return fmt.Errorf("wants a duration with a unit, got the bare number %s: write %ss (or %sms)", s, s, s)
		}
	}
	if err := setField(v, s); err != nil {
		return err
	}
	return nil
}

// want names what a field of type t accepts, for error messages.
func want(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration (e.g. 250ms, 1s)"
	case t == bytesType:
		return "a size (e.g. 65536, 512KiB, 64MiB)"
	}
	switch t.Kind() {
	case reflect.Int:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return strconv.Quote(n.Value)
	}
	return "a " + kindName(n.Kind)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func nodeErr(n *yaml.Node, path, format string, args ...any) error {
	return &FieldError{Field: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)}
}

// Document returns the configuration as its YAML file would spell it, for
// the status endpoint: keys are the YAML names (policy.window, not Window),
// durations read as in the file ("1s", not 1000000000) and sizes with their
// unit ("64MiB"). Secrets are masked as in Redacted.
func (c Config) Document() map[string]any {
	r := c.Redacted()
	return document(reflect.ValueOf(r)).(map[string]any)
}

func document(v reflect.Value) any {
	t := v.Type()
	switch {
	case t == durationType:
		return time.Duration(v.Int()).String()
	case t == bytesType:
		return Bytes(v.Int()).String()
	case t.Kind() == reflect.Struct:
		out := map[string]any{}
		for _, f := range yamlFields(t) {
			out[f.name] = document(fieldAt(v, f.index))
		}
		return out
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		out := map[string]any{}
		iter := v.MapRange()
		for iter.Next() {
			out[iter.Key().String()] = document(iter.Value())
		}
		return out
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return document(v.Elem())
	case t.Kind() == reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = document(v.Index(i))
		}
		return out
	}
	return v.Interface()
}
