package orca

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

func TestCollector(t *testing.T) {
	models := []Model{{Name: "a", RatePerSec: 100, BatchSize: 4, MaxBatch: 10, Instances: 1,
		Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 10}, LineKnown: true, QueuedRows: 3, InFlightRows: 4}}
	r := New(Options{Models: func() []Model { return models }})
	want := `
# HELP ratebatch_capacity_rows_per_second Rows per second the GPU serves at most at the current mix of models, under the learnt lines.
# TYPE ratebatch_capacity_rows_per_second gauge
ratebatch_capacity_rows_per_second 500
# HELP ratebatch_running_rows Rows in batches sent to the upstream and not yet answered, all models.
# TYPE ratebatch_running_rows gauge
ratebatch_running_rows 4
# HELP ratebatch_utilization Load of the GPU against its capacity under the learnt line, rho = sum over models of rate / mu(B_max); absent until the lines of the models with arrivals are learnt. The ORCA report's application_utilization.
# TYPE ratebatch_utilization gauge
ratebatch_utilization 0.2
# HELP ratebatch_waiting_rows Rows waiting in all of the proxy's queues (Triton's nv_inference_pending_request_count never sees them): the endpoint picker's queue metric.
# TYPE ratebatch_waiting_rows gauge
ratebatch_waiting_rows 3
`
	if err := testutil.CollectAndCompare(r.Collector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// Without a line, utilization and capacity are absent, not 0.
	models[0].LineKnown = false
	r = New(Options{Models: func() []Model { return models }})
	if n := testutil.CollectAndCount(r.Collector()); n != 2 {
		t.Errorf("%d series without a line, want 2 (waiting and running rows)", n)
	}
}
