package whatif

import "fmt"

// assumptions say, in sentences, what the replay took for granted: the
// page and the table print them under the figures.
func assumptions(rep Report) []string {
	l := rep.Line
	out := []string{fmt.Sprintf("Replayed on the line the plan in force was made with, the round trip as the proxy lives it: "+
		"tau(b) = %.4g·b + %.4g ms, B_max %d, %d instance(s), planned every %gs.", l.AlphaMs, l.Tau0Ms, l.MaxBatch, l.Instances, l.WindowSeconds)}
	if l.Batches > 0 {
		out = append(out, fmt.Sprintf("Each batch runs at the pace the server kept at that moment of the window: while each of its last %d batches ran, "+
			"at that batch's speed against the line (their round trips over the line: mean %.3f, squared coefficient of variation %.3f), "+
			"between them at the line's; a stall falls where it fell, for every setting alike.", l.Batches, l.MeanFactor, l.SpreadSCV))
	} else {
		out = append(out, fmt.Sprintf("Each batch takes the line's time exactly: the window holds fewer than %d round trips to draw a spread from.", minSpreadBatches))
	}
	out = append(out, fmt.Sprintf("The proxy's own time is as measured, the same for every setting: an instance held %.3g ms beyond a lone call's round trip "+
		"and %.3g ms beyond a merged batch's, a call's answer %.3g and %.3g ms after its batch, each plus the excess over its mean of the live proxy's "+
		"nearest that moment of the window; %.3g ms from a call's first byte at the door to the queue.",
		l.HoldLoneMs, l.HoldMergedMs, l.AfterLoneMs, l.AfterMergedMs, l.DoorMs))
	a := rep.Arrivals
	closed := a.ClosedLoop + a.Lone
	switch {
	case rep.ClosedLoop != nil:
		c := rep.ClosedLoop
		out = append(out, fmt.Sprintf("Arrivals are taken as independent of the setting, which a closed loop breaks: its callers send after their answers. "+
			"So the %d calls of closed-loop callers (%.0f%%) are replayed as %d synchronous client(s) thinking %.3g ms between an answer and the next call "+
			"(as many as send those calls at the latency lived; the queue counted %d closed-loop connections), over the span they came in "+
			"(planned as a closed loop where they are the only callers), and the other %d at the times they came.",
			c.Arrivals, 100*float64(c.Arrivals)/float64(max(a.Total, 1)), c.Clients, c.ThinkMs, c.Seen, a.Total-c.Arrivals))
	case closed > 0:
		out = append(out, fmt.Sprintf("Arrivals are taken as independent of the setting and replayed at the times they came, "+
			"including %d calls of closed-loop callers (too few, or their callers not seen, to replay as a loop): those would come later under a slower setting.", closed))
	default:
		out = append(out, "Arrivals are taken as independent of the setting and replayed at the times they came: no call came from a closed-loop caller.")
	}
	if a.MultiRow > 0 {
		out = append(out, fmt.Sprintf("A call of several rows (%d of them) is replayed as that many one-row requests arriving together.", a.MultiRow))
	}
	if l.BetaMJ != nil {
		idle := "no idle power known: requests per joule count the batches' energy only"
		if l.IdleWatts != nil {
			idle = fmt.Sprintf("%.3g W of idle power counted over the whole window (the model's share of the GPUs' by batch time)", *l.IdleWatts)
		}
		out = append(out, fmt.Sprintf("Energy: each batch costs the learnt zeta(b) = %.4g·b + %.4g mJ; %s.", *l.BetaMJ, *l.Zeta0MJ, idle))
	} else {
		out = append(out, "No energy line learnt (no meter, or not yet): the efficiency compared is the GPU's idle share.")
	}
	out = append(out, "Each setting's policy starts afresh at the window's start, on the learnt line: what a policy learns as it runs (the budget's trim) starts over.")
	if rep.Cut {
		out = append(out, "The proxy kept fewer minutes of arrivals than asked (whatif.arrivals): the window is what it kept.")
	}
	return out
}
