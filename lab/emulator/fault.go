package emulator

import "time"

// BatchInfo describes a batch at the moment it would start executing: it
// has waited for and holds an instance of its model.
type BatchInfo struct {
	Model     string
	Rows      int    // batch size (1 for a model that does not batch)
	Seq       uint64 // 1 for the first batch the server starts, across all models
	RequestID string // the request's "id", "" when it has none
}

// Fault is what a FaultFunc makes of one batch. The zero Fault executes the
// batch normally. Delay applies first; then Hang, Drop or Status, in that
// order of precedence, replace the execution.
type Fault struct {
	// Delay holds the instance this much longer before the batch (or the
	// fault below) proceeds: a slow device. It is not scaled by TimeScale.
	Delay time.Duration
	// Hang holds the instance and the request without an answer until the
	// client gives up or the server closes: a stuck device.
	Hang bool
	// Drop closes the connection without an answer: a crashed server.
	Drop bool
	// Status, when non-zero, answers with this HTTP status (400-599; any
	// other value answers 500 saying so) and a KServe error body carrying
	// Message instead of executing: a failing model.
	Status  int
	Message string
}

// FaultFunc decides the fault of each batch. It is called concurrently from
// request goroutines and must be safe for that.
type FaultFunc func(BatchInfo) Fault
