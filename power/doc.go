// Package power measures the energy the GPUs behind the proxy spend and turns
// it into requests per joule.
//
// A Source reads each GPU's energy counter and board power: NVML on the
// proxy's own host, Triton's Prometheus metrics endpoint of a remote host, or
// none (energy figures are then absent, never zero). A Meter polls a Source,
// integrates power where no counter exists, survives counter wrap-around and
// resets, and combines the energy with the batches the dispatcher reports
// (Meter.Begin / Span.End) into idle and busy power and requests per joule per
// GPU and per model, over sliding windows and since start. The Meter is a
// prometheus.Collector and produces a JSON-ready Snapshot for the status
// endpoint. docs/ENERGY.md explains every figure and its known error.
//
// The package does not know about batching policies: it only hears when a
// batch starts and ends and how many requests it served.
package power
