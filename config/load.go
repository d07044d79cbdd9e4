package config

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/internal/redact"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/regression"
)

// EnvPrefix starts every environment variable ratebatch reads.
const EnvPrefix = "RATEBATCH_"

// option is one scalar setting, found by walking Config's fields.
type option struct {
	path   string // YAML path, e.g. policy.window
	flag   string // flag name, e.g. policy-window
	env    string // e.g. RATEBATCH_POLICY_WINDOW
	help   string
	secret bool
	typ    reflect.Type
	index  []int // field index path from Config, as fieldAt and setAt read it
	copies [][]int
}

// set sets the option in v (a Config) from its spelling in a file or a
// flag, and its copies (yamlField) with it.
func (o option) set(v reflect.Value, s string) error {
	return setCopies(v, o.index, o.copies, func(f reflect.Value) error { return setField(f, s) })
}

// options are Config's options. They are listed at each use, not once at
// start: the policy section has the options of every registered policy,
// and a test may register one.
func options() []option { return collect(reflect.TypeFor[Config](), nil, "") }

func collect(t reflect.Type, index []int, prefix string) []option {
	var out []option
	for _, yf := range yamlFields(t) {
		f, name := yf.field, yf.name
		if f.Tag.Get("noflag") == "true" {
			continue
		}
		idx := append(append([]int(nil), index...), yf.index...)
		var copies [][]int
		for _, c := range yf.copies {
			copies = append(copies, append(append([]int(nil), index...), c...))
		}
		path := prefix + name
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			out = append(out, collect(f.Type, idx, path+".")...)
			continue
		}
		fl := f.Tag.Get("flag")
		if fl == "" {
			fl = strings.NewReplacer(".", "-", "_", "-").Replace(path)
		}
		out = append(out, option{
			path:   path,
			flag:   fl,
			env:    EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_").Replace(path)),
			help:   help(f),
			secret: f.Tag.Get("secret") == "true",
			typ:    f.Type,
			index:  idx,
			copies: copies,
		})
	}
	return out
}

// help is a field's help tag with {policies} replaced by the names of the
// registered policies, and {power_sources} by the registered energy
// sources, each with what it reads: an option's list of names follows
// from what registers them, not from its tag.
func help(f reflect.StructField) string {
	var sources []string
	for _, k := range power.Kinds() {
		sources = append(sources, k.Name+" ("+k.About+")")
	}
	return strings.NewReplacer("{policies}", strings.Join(policy.Names(), ", "),
		"{power_sources}", strings.Join(sources, ", ")).Replace(f.Tag.Get("help"))
}

// Source says where a configuration comes from: a YAML file path (may be
// empty), an environment lookup and a flag set populated by BindFlags.
type Source struct {
	File      string
	LookupEnv func(string) (string, bool)
	Flags     *flag.FlagSet
}

// BindFlags registers one flag per option on fs. Values are applied by Load,
// after the file and the environment, and only for flags actually given.
func BindFlags(fs *flag.FlagSet) {
	def := Default()
	dv := reflect.ValueOf(&def).Elem()
	for _, o := range options() {
		usage := fmt.Sprintf("%s (yaml %s, env %s)", o.help, o.path, o.env)
		fs.Var(&pending{o: o, def: format(fieldAt(dv, o.index))}, o.flag, usage)
	}
}

// pending holds a flag's raw text until Load applies it.
type pending struct {
	o   option
	def string
	raw string
	set bool
}

func (p *pending) String() string {
	if p == nil {
		return ""
	}
	if p.set {
		return p.raw
	}
	return p.def
}

// IsBoolFlag lets a boolean option be given as a bare --flag, as the flag
// package's own booleans are.
func (p *pending) IsBoolFlag() bool {
	return p.o.typ.Kind() == reflect.Bool
}

func (p *pending) Set(s string) error {
	// Parse now so a bad flag fails at parse time with the flag's name.
	if err := setField(reflect.New(p.o.typ).Elem(), s); err != nil {
		return err
	}
	p.raw, p.set = s, true
	return nil
}

// Load builds the configuration: defaults, then the YAML file, then the
// environment, then flags; then validates it.
func Load(src Source) (*Config, error) {
	cfg := Default()
	// Every mistake is collected, from the file, the environment, the flags
	// and validation, so that one run names them all.
	var errs []error
	unread := false // the file is not YAML: validating the rest would only add noise
	if src.File != "" {
		data, err := os.ReadFile(src.File)
		if err != nil {
			return nil, fmt.Errorf("config: reading %s: %w", src.File, err)
		}
		if err := decodeYAML(data, &cfg); err != nil {
			errs = append(errs, inFile(err, src.File))
			var se *syntaxError
			unread = errors.As(err, &se)
		}
	}
	v := reflect.ValueOf(&cfg).Elem()
	if src.LookupEnv != nil {
		for _, o := range options() {
			if s, ok := src.LookupEnv(o.env); ok {
				if err := o.set(v, s); err != nil {
					errs = append(errs, fieldErr(o.path, "environment %s: %v", o.env, err))
				}
			}
		}
	}
	if src.Flags != nil {
		src.Flags.Visit(func(f *flag.Flag) {
			p, ok := f.Value.(*pending)
			if !ok {
				return
			}
			if err := p.o.set(v, p.raw); err != nil {
				errs = append(errs, fieldErr(p.o.path, "flag -%s: %v", p.o.flag, err))
			}
		})
	}
	if unread {
		return nil, flatten(errors.Join(errs...))
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.checkProfiles(filepath.Dir(src.File)); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.checkTLS(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, flatten(err)
	}
	return &cfg, nil
}

// inFile names file in every FieldError of err (a tree of errors.Join),
// and wraps what is not a FieldError (a YAML syntax error) with the file.
func inFile(err error, file string) error {
	var out []error
	for _, e := range leaves(err) {
		var fe *FieldError
		if errors.As(e, &fe) {
			fe.File = file
			out = append(out, fe)
			continue
		}
		var se *syntaxError
		if errors.As(e, &se) {
			se.file = file
			out = append(out, se)
			continue
		}
		out = append(out, fmt.Errorf("config: %s: %w", file, e))
	}
	return errors.Join(out...)
}

// leaves lists the errors joined in err, depth first; err itself when it
// joins none.
func leaves(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}

// flatten returns err itself when it is one error, else one errors.Join
// of its leaves: a caller's errors.As finds the first, and its message is
// one line per mistake.
func flatten(err error) error {
	l := leaves(err)
	if len(l) == 1 {
		return l[0]
	}
	return errors.Join(l...)
}

// checkProfiles resolves each model's profile_csv against dir, the config
// file's directory (so a config and its profiles can move together), and
// refuses one that cannot be read or fitted: a typo in a path
// should stop the start, not surface as a warning at the model's first
// request.
func (c *Config) checkProfiles(dir string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		m := c.Models[name]
		if m.ProfileCSV == "" {
			continue
		}
		field := "models." + name + ".profile_csv"
		if !filepath.IsAbs(m.ProfileCSV) {
			m.ProfileCSV = filepath.Join(dir, m.ProfileCSV)
			c.Models[name] = m
		}
		f, err := os.Open(m.ProfileCSV)
		if err != nil {
			errs = append(errs, fieldErr(field, "cannot read the profile: %v", err))
			continue
		}
		samples, err := regression.ReadCSV(f)
		f.Close()
		if err == nil {
			_, err = regression.FitSamples(samples, regression.Options{})
		}
		if err != nil {
			errs = append(errs, fieldErr(field, "%s is not a usable profile (columns %s,%s): %v", m.ProfileCSV, regression.ColumnBatch, regression.ColumnLatency, err))
		}
	}
	return errors.Join(errs...)
}

func setField(f reflect.Value, s string) error {
	if v, ok := f.Addr().Interface().(interface{ Set(string) error }); ok {
		return v.Set(s) // a type that reads its own flag form (RestrictedAPI)
	}
	switch f.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("wants a duration (e.g. 250ms, 1s), got %q", s)
		}
		f.SetInt(int64(d))
		return nil
	case Bytes:
		b, err := ParseBytes(s)
		if err != nil {
			return err
		}
		f.SetInt(int64(b))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("wants an integer, got %q", s)
		}
		f.SetInt(int64(n))
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("wants a number, got %q", s)
		}
		f.SetFloat(x)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("wants true or false, got %q", s)
		}
		f.SetBool(b)
	default:
		return fmt.Errorf("unsupported option type %s", f.Type())
	}
	return nil
}

func format(f reflect.Value) string {
	switch x := f.Interface().(type) {
	case time.Duration:
		return x.String()
	case Bytes:
		return x.String()
	}
	return fmt.Sprint(f.Interface())
}

// Markdown renders the option reference of docs/CONFIG.md.
func Markdown() string {
	def := Default()
	dv := reflect.ValueOf(&def).Elem()
	var b strings.Builder
	b.WriteString("| YAML key | flag | environment | default | meaning |\n|---|---|---|---|---|\n")
	for _, o := range options() {
		d := format(fieldAt(dv, o.index))
		if d == "" {
			d = "(empty)"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` | `%s` | %s |\n", o.path, o.flag, o.env, d, o.help)
	}
	return b.String()
}

// Redacted returns a copy safe to log or show: secrets are masked, and so
// are the credentials a URL option carries (redact.URL) and the header
// values of restricted_api.
func (c Config) Redacted() Config {
	for _, u := range []*string{&c.Upstream, &c.Tracing.OTLPEndpoint, &c.Power.MetricsURL} {
		*u = redact.URL(*u)
	}
	if len(c.UpstreamHeaders) > 0 { // their values are credentials
		masked := make(map[string]string, len(c.UpstreamHeaders))
		for k := range c.UpstreamHeaders {
			masked[k] = "REDACTED"
		}
		c.UpstreamHeaders = masked
	}
	c.RestrictedAPI = c.RestrictedAPI.redacted()
	v := reflect.ValueOf(&c).Elem()
	for _, o := range options() {
		if o.secret {
			setAt(v, o.index, func(f reflect.Value) error {
				if f.String() != "" {
					f.SetString("REDACTED")
				}
				return nil
			})
		}
	}
	return c
}

// RedactArgs returns a copy of a command line (os.Args) safe to show: the
// value of every secret option's flag (--admin-token T, --admin-token=T,
// one dash or two) is masked, and so are the credentials of any URL. The
// process's command line is readable by every local user (ps, /proc) and
// by Go's profiler (/debug/pprof/cmdline): a secret is better given in
// the environment (RATEBATCH_ADMIN_TOKEN) or the file.
func RedactArgs(args []string) []string {
	secret := map[string]bool{}
	for _, o := range options() {
		if o.secret {
			secret[o.flag] = true
		}
	}
	out := make([]string, len(args))
	maskNext := false
	for i, a := range args {
		switch {
		case maskNext:
			out[i], maskNext = redact.Mask, false
			continue
		case strings.HasPrefix(a, "-"):
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if secret[name] {
				if hasValue {
					a = a[:strings.IndexByte(a, '=')+1] + redact.Mask
				} else {
					maskNext = true
				}
			}
		}
		if strings.Contains(a, "://") {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
				a = k + "=" + redact.URL(v)
			} else {
				a = redact.URL(a)
			}
		}
		out[i] = a
	}
	return out
}
