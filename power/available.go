package power

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Whether the meter measures. A source can be configured and yet yield no
// figure: Triton without GPU metrics (a CPU host, --allow-gpu-metrics
// false), a metrics endpoint that is unreachable, GPUs whose counters read
// 0. Then every joule figure is null, and the energy-aware policies, which
// need a batch's energy, take it proportional to the batch's GPU busy time:
// they optimise requests per GPU-second instead of per joule. That must not
// go unsaid: the Snapshot says available false and why, a gauge says 0,
// and a WARN says it once when it starts, an INFO when it ends.

// dryPolls is how many polls in a row without a figure make a meter that
// measured say it no longer does: one failed scrape is a hiccup, not an
// outage. A meter that never measured says so at its first dry poll.
const dryPolls = 3

// fallbackObjective is what the energy-aware policies do without energy,
// as the log and the status say it.
const fallbackObjective = "energy-aware policies (budget, smdp's w2) take a batch's energy as proportional to its GPU busy time and optimise requests per GPU-second instead of per joule, for models with no energy line learnt before"

// measuring is the meter's verdict on its source, under Meter.mu.
type measuring struct {
	log    *slog.Logger
	on     bool   // the source yields figures
	polled bool   // at least one poll
	dry    int    // polls in a row without a figure
	why    string // why it does not measure, when !on
	warned bool   // a WARN said it does not measure, and no INFO since
}

// poll updates the verdict after a poll that yielded a figure or not (err
// is the poll's failure, if any).
func (v *measuring) poll(source string, yielded bool, readings int, err error) {
	v.polled = true
	if yielded {
		v.dry, v.why = 0, ""
		if !v.on {
			v.on = true
			if v.warned {
				v.warned = false
				v.log.Info("energy measured again", "source", source)
			}
		}
		return
	}
	v.dry++
	v.why = noFigure(source, readings, err)
	if v.on && v.dry < dryPolls {
		return
	}
	v.on = false
	if !v.warned {
		v.warned = true
		v.log.Warn("energy not measured: joule figures are absent, and "+fallbackObjective, "source", source, "why", v.why)
	}
}

// noFigure says why a poll yielded no figure.
func noFigure(source string, readings int, err error) string {
	if err != nil {
		var msgs []string
		eachError(err, func(e error) {
			var ge *GPUError
			if errors.As(e, &ge) {
				msgs = append(msgs, "GPU "+ge.GPU+": "+ge.Err.Error())
				return
			}
			msgs = append(msgs, e.Error())
		})
		return strings.Join(msgs, "; ")
	}
	if readings == 0 {
		return fmt.Sprintf("the %s source reports no GPU", source)
	}
	return fmt.Sprintf("the %s source reports neither energy nor power of any GPU", source)
}

// unavailable is why the Snapshot says available false ("" when it is
// true), under Meter.mu. What the policies do instead is each model's
// objective (monitor.Snapshot's).
func (m *Meter) unavailable() string {
	switch {
	case !m.hasSource:
		return "no energy source (power.source none, or auto with neither power.metrics_url nor an upstream on Triton's port 8000)"
	case !m.measure.polled:
		return "not read yet"
	case !m.measure.on:
		return m.measure.why
	}
	return ""
}

// yielded reports whether readings hold a figure of some GPU.
func yielded(readings []Reading) bool {
	for _, r := range readings {
		if r.HasEnergy || r.HasPower {
			return true
		}
	}
	return false
}
