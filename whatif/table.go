package whatif

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// tableWidth is the most columns the table and its notes take.
const tableWidth = 100

// WriteTable prints a report as `ratebatch whatif` does: what was
// replayed, one row per setting (the recommended marked >, the front *),
// the command that applies the recommendation, and the assumptions, in
// at most tableWidth columns.
func WriteTable(w io.Writer, rep Report) {
	fmt.Fprintf(w, "what-if for model %s: %s to %s (%s)\n", rep.Model, rep.From.Local().Format("15:04:05"),
		rep.To.Local().Format("15:04:05"), roundSpan(time.Duration(rep.Seconds*float64(time.Second))))
	fmt.Fprintln(w, wrap(rep.Arrivals.String(), tableWidth, ""))
	if !rep.Enough {
		fmt.Fprintln(w, wrap(rep.Reason, tableWidth, ""))
		return
	}
	l := rep.Lived
	fmt.Fprintf(w, "lived: %d calls, mean %s ms, p99 %s ms, %s requests/J, busy %s\n", l.Requests, num(l.MeanMs), num(l.P99Ms),
		num(l.RequestsPerJoule), share(l.BusyShare))
	c := rep.CheckVsLived
	fmt.Fprintf(w, "replay of the setting in force / lived: mean %s, p99 %s, requests/J %s\n\n", times(c.Mean), times(c.P99), times(c.RequestsPerJoule))

	eff := "req/J"
	if rep.Efficiency == EfficiencyIdle {
		eff = "idle"
	}
	const labelW = 33
	fmt.Fprintf(w, "  %-*s %8s %8s %6s %7s %6s | %s\n", labelW, "", "", "", "", "", "", "against ad-hoc")
	fmt.Fprintf(w, "  %-*s %8s %8s %6s %7s %6s | %6s %6s %7s\n", labelW, "setting", "mean ms", "p99 ms", "batch", eff, "busy", "mean", "p99", eff)
	for i, pt := range rep.Points {
		mark := "  "
		switch {
		case i == rep.Recommended:
			mark = "> "
		case pt.Front:
			mark = "* "
		}
		lab := pt.Label
		if len(lab) > labelW {
			lab = lab[:labelW-1] + "~"
		}
		if pt.Error != "" {
			fmt.Fprintf(w, "%s%-*s %s\n", mark, labelW, lab, clip("not replayed: "+pt.Error, tableWidth-labelW-3))
			continue
		}
		e, ve := num(pt.RequestsPerJoule), gain(pt.VsAdhoc.RequestsPerJoule)
		if rep.Efficiency == EfficiencyIdle {
			e, ve = share(ptr(1-pt.BusyShare)), "-"
		}
		fmt.Fprintf(w, "%s%-*s %8.3f %8.3f %6.2f %7s %6s | %6s %6s %7s\n", mark, labelW, lab, pt.MeanMs, pt.P99Ms, pt.MeanBatch, e,
			share(ptr(pt.BusyShare)), times(pt.VsAdhoc.Mean), times(pt.VsAdhoc.P99), ve)
	}
	fmt.Fprintln(w, "\n> recommended   * on the front: no other setting has a lower mean and p99 and more "+eff)
	fmt.Fprintln(w, wrap("recommended: "+rep.Recommendation, tableWidth, "  "))
	if i := rep.Recommended; i >= 0 && rep.Points[i].Apply != "" {
		fmt.Fprintln(w, "apply it:")
		fmt.Fprintln(w, wrapCommand(rep.Points[i].Apply, tableWidth))
	}
	fmt.Fprintln(w, "\nassumptions:")
	for _, a := range rep.Assumptions {
		fmt.Fprintln(w, wrap("- "+a, tableWidth, "  "))
	}
}

func num(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3g", *v)
}

func share(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

func times(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *v)
}

func gain(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(*v-1))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "~"
}

// wrap breaks s at spaces into lines of at most width columns, the lines
// after the first indented.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		switch {
		case i == 0:
		case line+1+len(word) > width:
			b.WriteString("\n" + indent)
			line = len(indent)
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// wrapCommand breaks a shell command at spaces into lines of at most
// width columns joined by backslashes, so that it still runs pasted. A
// quoted argument is not broken inside.
func wrapCommand(cmd string, width int) string {
	var parts []string
	for _, f := range strings.SplitAfter(cmd, " ") {
		if n := len(parts); n > 0 && strings.Count(parts[n-1], "'")%2 == 1 {
			parts[n-1] += f // inside a quoted argument
			continue
		}
		parts = append(parts, f)
	}
	var b strings.Builder
	line := 0
	for _, p := range parts {
		if line > 0 && line+len(p)+2 > width {
			b.WriteString("\\\n    ")
			line = 4
		}
		b.WriteString(p)
		line += len(p)
	}
	return b.String()
}
