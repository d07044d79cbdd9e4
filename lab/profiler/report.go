package profiler

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// JSON is the profile command's --json document: the round-trip fit, the
// per-size medians, and the server's own compute line (null when it keeps
// no batch statistics).
type JSON struct {
	Model string `json:"model"`
	batchcost.Latency
	R2            float64  `json:"r2"`
	N             int      `json:"n"`
	Sizes         []Size   `json:"sizes"`
	ServerAlphaMs *float64 `json:"server_alpha_ms"`
	ServerTau0Ms  *float64 `json:"server_tau0_ms"`
}

// JSON is r as its document for model.
func (r Result) JSON(model string) JSON {
	out := JSON{Model: model, Latency: r.Fit.Line, R2: r.Fit.R2, N: r.Fit.N, Sizes: r.Sizes}
	if r.Server != nil {
		out.ServerAlphaMs, out.ServerTau0Ms = &r.Server.AlphaMs, &r.Server.Tau0Ms
	}
	return out
}

// WriteJSON writes r's document for model as one JSON object.
func (r Result) WriteJSON(w io.Writer, model string) error {
	return json.NewEncoder(w).Encode(r.JSON(model))
}

// WriteText prints the fitted line and, when the server keeps statistics,
// its own compute line and what the round trip adds.
func (r Result) WriteText(w io.Writer) {
	fit, server := r.Fit, r.Server
	fmt.Fprintf(w, "tau(b) = %.4g*b + %.4g ms, R^2 %.4f over %d samples\n", fit.AlphaMs, fit.Tau0Ms, fit.R2, fit.N)
	if server != nil {
		fmt.Fprintf(w, "server's own compute (batch statistics): tau(b) = %.4g*b + %.4g ms; the round trip adds %.3g ms at b=1\n",
			server.AlphaMs, server.Tau0Ms, fit.TauMs(1)-server.TauMs(1))
	}
}

// WriteProgress prints one measured size (Options.Progress).
func WriteProgress(w io.Writer, s Size) {
	fmt.Fprintf(w, "b=%-4d median %8.3f ms  (%d ok, %d errors)\n", s.Batch, s.MedianMs, s.OK, s.Errors)
}
