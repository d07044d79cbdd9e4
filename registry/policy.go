package registry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/policy"
)

// newPolicy builds the named policy for a model with the options that
// apply to it (options), and says what it is as set. Called with r.mu held.
func (r *Models) newPolicy(model, name string) (policy.Policy, InForce, error) {
	o, err := r.options(model)
	if err == nil {
		var pol policy.Policy
		if pol, err = policy.New(name, o); err == nil {
			return pol, InForce{Policy: name, Options: config.PolicyOptionsOf(name, o)}, nil
		}
	}
	return nil, InForce{}, fmt.Errorf("model %s: %w", model, err)
}

// options are the policy options that apply to a model: the policy
// section's, the model's overrides of them, then what PUT /policy set for
// every model and, last, for this one. Called with r.mu held.
func (r *Models) options(model string) (policy.Options, error) {
	o := r.cfg.Policy.Options
	m := r.cfg.Models[model]
	if m.SLA > 0 {
		policy.Each(&o, func(d *policy.DeadlineOptions) { d.SLA = m.SLA })
	}
	policy.Each(&o, func(s *policy.StaticOptions) {
		if s.Batch == 0 {
			s.Batch = max(m.MaxBatchSize, 0)
		}
	})
	if m.LatencyBudget != "" {
		policy.Each(&o, func(b *policy.BudgetOptions) { b.LatencyBudget = m.LatencyBudget })
	}
	for _, set := range []map[string]string{r.setOptions[""], r.setOptions[model]} {
		for k, v := range set {
			if err := config.SetPolicyOption(&o, k, v); err != nil {
				return o, err
			}
		}
	}
	return o, nil
}

// policyName is the policy a model that is batched runs: the one PUT
// /policy set for it, else for every model, else the configuration's.
// Called with r.mu held.
func (r *Models) policyName(model string) string {
	if n, ok := r.setNames[model]; ok {
		return n
	}
	if n, ok := r.setNames[""]; ok {
		return n
	}
	return r.cfg.ModelPolicy(model)
}

// InForce is a policy as it is set: its name and the options it takes,
// by key, spelt as in the configuration file, each with the default its
// zero value stands for where that is a fixed value (config.PolicyOptionsOf).
type InForce struct {
	Model   string         `json:"model,omitempty"`
	Policy  string         `json:"policy"`
	Options map[string]any `json:"options"`
}

// SetPolicy switches a batched model (or every one, for model "") to the
// named policy at run time, with options by their key in the
// configuration's policy section, spelt as in the file (latency_budget
// "1.10x"); options not given are the configuration's, or what an earlier
// change set for the model. The change stays the model's until a later
// one; one for every model replaces what earlier ones set per model, for
// the policy and for the options it names. SetPolicy returns the models
// switched once each publishes a rule of the new policy (or ctx ends), so
// the state read next is the new one; on an error nothing is switched. An
// option the named policy does not take (config.PolicyTakes) is refused.
func (r *Models) SetPolicy(ctx context.Context, model, name string, options map[string]string) ([]string, error) {
	var check policy.Options
	for _, k := range slices.Sorted(maps.Keys(options)) {
		// A key the policy does not take is a mistake said at once, not
		// an option ignored.
		if err := config.PolicyTakes(name, k); err != nil {
			return nil, err
		}
		if err := config.SetPolicyOption(&check, k, options[k]); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	names, opts := maps.Clone(r.setNames), maps.Clone(r.setOptions)
	undo := func() { r.setNames, r.setOptions = names, opts }
	r.record(model, name, options)
	type change struct {
		e   *entry
		pol policy.Policy
		in  InForce
	}
	var changes []change
	for _, e := range r.models {
		if !e.batched || (model != "" && e.name != model) {
			continue
		}
		pol, in, err := r.newPolicy(e.name, name)
		if err != nil {
			undo()
			r.mu.Unlock()
			return nil, err
		}
		changes = append(changes, change{e, pol, in})
	}
	if len(changes) == 0 {
		undo()
		r.mu.Unlock()
		return nil, fmt.Errorf("no batched model %q", model)
	}
	switched := make([]string, len(changes))
	planned := make([]<-chan struct{}, len(changes))
	for i, c := range changes {
		planned[i] = c.e.mon.SetPolicy(c.pol)
		c.e.policy = c.in
		switched[i] = c.e.name
	}
	r.mu.Unlock()
	sort.Strings(switched)
	for _, p := range planned {
		select {
		case <-p:
		case <-ctx.Done():
			return switched, fmt.Errorf("policy %s set, but its first rule is not planned yet: %w", name, ctx.Err())
		}
	}
	return switched, nil
}

// record notes a change by PUT /policy (see SetPolicy): the maps are
// replaced, not edited, so that SetPolicy can put the old ones back.
// Called with r.mu held.
func (r *Models) record(model, name string, options map[string]string) {
	names, opts := map[string]string{}, map[string]map[string]string{}
	for m, n := range r.setNames {
		if model != "" {
			names[m] = n
		}
	}
	for m, set := range r.setOptions {
		set = maps.Clone(set)
		if model == "" {
			for k := range options {
				delete(set, k)
			}
		}
		opts[m] = set
	}
	names[model] = name
	if opts[model] == nil {
		opts[model] = map[string]string{}
	}
	maps.Copy(opts[model], options)
	r.setNames, r.setOptions = names, opts
}

// Policies is the policy in force: for every batched model (Default, the
// configuration's policy section with what PUT /policy set for all) and
// for each batched model.
type Policies struct {
	Default InForce   `json:"default"`
	Models  []InForce `json:"models"`
}

// Policies returns the policy in force, the models sorted by name.
func (r *Models) Policies() Policies {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.config()
	out := Policies{Default: InForce{Policy: cfg.Policy.Name, Options: config.PolicyOptionsOf(cfg.Policy.Name, cfg.Policy.Options)},
		Models: []InForce{}}
	for _, e := range r.models {
		if e.batched && e.mon != nil {
			in := e.policy
			in.Model = e.name
			out.Models = append(out.Models, in)
		}
	}
	sort.Slice(out.Models, func(i, j int) bool { return out.Models[i].Model < out.Models[j].Model })
	return out
}

// InForce returns the policy a batched model runs and its own options
// that are set (config.OwnOptions), as PUT /policy would put them back.
func (r *Models) InForce(model string) (name string, options map[string]string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.models[model]
	if e == nil || !e.batched || e.mon == nil {
		return "", nil, false
	}
	o, err := r.options(model)
	if err != nil {
		return e.policy.Policy, nil, true
	}
	return e.policy.Policy, config.OwnOptions(e.policy.Policy, o), true
}

// NewPolicy builds the named policy for a batched model as SetPolicy
// would switch it to with options set (over the model's own), then tune
// edits its options, without switching anything: a what-if replays it.
func (r *Models) NewPolicy(model, name string, set map[string]string, tune func(*policy.Options)) (policy.Policy, error) {
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if err := config.PolicyTakes(name, k); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	o, err := r.options(model)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if err := config.SetPolicyOption(&o, k, set[k]); err != nil {
			return nil, err
		}
	}
	if tune != nil {
		tune(&o)
	}
	return policy.New(name, o)
}
