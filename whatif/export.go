package whatif

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Bounds of an export's bins: the rate series steps from one bin's rate
// to the next in stepEdge (its times must increase strictly), so a bin is
// far longer than that.
const (
	DefaultBin = 100 * time.Millisecond
	MinBin     = time.Millisecond
	stepEdge   = time.Microsecond
)

// WriteTrace writes the model's arrivals over the last d as a rate
// series, the CSV `ratebatch load --trace` and `ratebatch sim --trace`
// read (columns time_s,rate_rps, # comments): the calls counted per bin,
// each bin a step at its count's rate, so that a load generator replays
// the same number of calls in each bin (drawn as Poisson arrivals within
// it). The comments say whose arrivals, when, and of which callers.
func (r *Recorder) WriteTrace(w io.Writer, model string, d, bin time.Duration) error {
	if bin < MinBin {
		return fmt.Errorf("bin %v: want at least %v", bin, MinBin)
	}
	tr, err := r.traffic(model, d, false)
	if err != nil {
		return err
	}
	n := max(int(math.Ceil(float64(tr.span())/float64(bin))), 1)
	counts := make([]int, n)
	for _, a := range tr.arrivals {
		counts[min(int(a.at.Sub(tr.from)/bin), n-1)]++
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# ratebatch arrivals of model %s from %s to %s (%s), %d calls counted in bins of %v\n",
		model, tr.from.UTC().Format(time.RFC3339Nano), tr.to.UTC().Format(time.RFC3339Nano), tr.span().Round(time.Millisecond), len(tr.arrivals), bin)
	if tr.cut {
		fmt.Fprintf(bw, "# the proxy kept arrivals from %s only (whatif.arrivals)\n", tr.from.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(bw, "# callers: %s\n", countKinds(tr.arrivals))
	fmt.Fprintln(bw, "# a closed loop's calls follow their answers: replayed at these rates, they come whatever the latency")
	fmt.Fprintln(bw, "time_s,rate_rps")
	sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) }
	rate := func(c int) string { return strconv.FormatFloat(float64(c)/bin.Seconds(), 'g', -1, 64) }
	// Runs of bins at the same count are one step: its start and its end.
	for i := 0; i < n; {
		j := i
		for j+1 < n && counts[j+1] == counts[i] {
			j++
		}
		start, end := time.Duration(i)*bin, time.Duration(j+1)*bin
		fmt.Fprintf(bw, "%s,%s\n%s,%s\n", sec(start), rate(counts[i]), sec(end-stepEdge), rate(counts[i]))
		i = j + 1
	}
	fmt.Fprintf(bw, "%s,%s\n", sec(time.Duration(n)*bin), rate(counts[n-1]))
	return bw.Flush()
}
