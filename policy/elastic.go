package policy

import "fmt"

// NameElastic is the elastic concurrent-batches policy.
const NameElastic = "elastic"

// Elastic keeps several batches in flight when the model has several
// instances (ALGORITHMS.md section 6, after E2bird): a small batch starts on
// a free instance while a large one runs, as long as the rows in flight,
// summed over the batches, stay within RowCap. Without a free instance, or
// without room under the cap, rows queue until a batch completes.
//
// Each launch is work-conserving: it takes min(queue, B_max, room under the
// cap) rows. Waiting to fill a batch would defeat the point, which is to
// use an idle instance now; the cap is what keeps the instances from
// slowing each other down on one GPU. RowCap is meant to be profiled: the
// largest summed batch size at which concurrent batches still meet the
// latency target. Its default, B_max, lets concurrent batches together use
// what one full batch would.
//
// With one instance Elastic is ad-hoc batching (capped at RowCap).
type Elastic struct {
	RowCap int // 0 selects the model's B_max
}

func init() {
	Register(NameElastic, func(o ElasticOptions) (Policy, error) {
		return Elastic(o), nil
	})
}

// ElasticOptions are elastic's options.
type ElasticOptions struct {
	RowCap int `yaml:"row_cap" help:"elastic: cap on the summed size of in-flight batches (0: max_batch_size)"`
}

// Validate implements validator.
func (o ElasticOptions) Validate() error {
	if o.RowCap < 0 {
		return paramErr("row_cap", "must be >= 0 (0: the model's max batch size), got %d", o.RowCap)
	}
	return nil
}

// Name implements Policy.
func (Elastic) Name() string { return NameElastic }

// Plan implements Policy.
func (p Elastic) Plan(e Estimate) Rule {
	if err := e.Validate(); err != nil {
		return fallback(NameElastic, e, err)
	}
	c := p.RowCap
	if c <= 0 {
		c = e.MaxBatch
	}
	return ElasticRule{RowCap: c, instances: e.Instances}
}

// ElasticRule is one planned elastic rule.
type ElasticRule struct {
	RowCap    int
	instances int
}

// Decide implements Rule.
func (r ElasticRule) Decide(q Queue) Decision {
	if q.Rows <= 0 || !q.Free() {
		return Wait()
	}
	room := r.RowCap - q.InFlightRows
	if room <= 0 {
		return Wait() // a completion makes room and brings the next decision
	}
	n := min(q.Rows, room)
	if q.MaxBatch > 0 {
		n = min(n, q.MaxBatch)
	}
	return Send(n)
}

// Status implements Rule. BatchSize is the row cap.
func (r ElasticRule) Status() Status {
	return Status{Policy: NameElastic, BatchSize: r.RowCap,
		Note: fmt.Sprintf("up to %d batches in flight, %d rows in flight at most", max(r.instances, 1), r.RowCap)}
}
