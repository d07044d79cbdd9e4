package compare

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
)

// Lists are the compare command's comma lists: preset names, loads rho, a
// trace (a built-in name or a CSV file; empty or "none": no trace run) and
// policy names ("all": every registered policy).
type Lists struct{ Presets, Rhos, Trace, Policies string }

// Apply sets o's presets, loads, trace and policies from l. Its errors name
// the flags.
func (l Lists) Apply(o *Options) error {
	for _, name := range splitList(l.Presets) {
		p, err := preset.Lookup(name)
		if err != nil {
			return fmt.Errorf("--presets: %w", err)
		}
		o.Presets = append(o.Presets, p)
	}
	o.Rhos = nil
	for _, part := range splitList(l.Rhos) {
		v, err := strconv.ParseFloat(part, 64)
		if err != nil {
			return fmt.Errorf("--rhos: %q is not a number", part)
		}
		o.Rhos = append(o.Rhos, v)
	}
	if len(o.Rhos) == 0 {
		return fmt.Errorf("--rhos: no value in %q", l.Rhos)
	}
	if t := strings.TrimSpace(l.Trace); t != "" && t != "none" {
		var err error
		if o.Trace, err = trace.Load(t); err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
	}
	if p := strings.TrimSpace(l.Policies); p != "all" {
		if o.Policies = splitList(p); len(o.Policies) == 0 {
			return errors.New("--policies: name at least one policy, or all")
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
