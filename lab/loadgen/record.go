package loadgen

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// ErrorKind classifies why a request did not count as ok.
type ErrorKind uint8

// The error kinds, in the order they are reported.
const (
	KindNone       ErrorKind = iota // answered with 200 (and verified, when asked)
	KindDropped                     // never sent: the in-flight pool was full (not an error)
	KindStatus                      // answered with a status other than 200; see Summary.StatusCounts
	KindTimeout                     // no full answer within Config.Timeout
	KindConnection                  // connection refused, reset or closed by the target
	KindTransport                   // any other failure to send or receive
	KindDecode                      // a 200 whose body is not a valid KServe v2 response (with Verify)
	KindMismatch                    // a 200 whose outputs do not match its own inputs (with Verify)
	KindCanceled                    // the run was canceled while the request was in flight
	numKinds
)

var kindNames = [numKinds]string{
	KindNone:       "",
	KindDropped:    "dropped_by_client",
	KindStatus:     "http_status",
	KindTimeout:    "timeout",
	KindConnection: "connection",
	KindTransport:  "transport",
	KindDecode:     "decode",
	KindMismatch:   "mismatch",
	KindCanceled:   "canceled",
}

// String is the name used in CSV files and in Summary.ErrorsByKind.
func (k ErrorKind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown"
}

// Record is what happened to one scheduled request.
type Record struct {
	// Start is when the request was sent (for a dropped one: when it was
	// due), from the start of the run.
	Start time.Duration
	// Lag is how much later than its Poisson arrival time the request was
	// sent: timer granularity, or waiting for a free slot with OnFull Wait.
	Lag time.Duration
	// Latency runs from sending the request to reading the last byte of the
	// answer (or to the failure). Zero for a dropped request.
	Latency time.Duration
	Status  int // HTTP status; 0 when no answer arrived
	Bytes   int // bytes of the response body
	Err     ErrorKind
}

// classify maps a client error to its kind.
func classify(err error) ErrorKind {
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, os.ErrDeadlineExceeded):
		return KindTimeout
	case errors.As(err, &netErr) && netErr.Timeout():
		return KindTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, fasthttp.ErrConnectionClosed):
		return KindConnection
	}
	return KindTransport
}

// recordBook hands out Record slots that never move: the scheduler takes a
// slot per arrival and passes its pointer to a worker, so a worker writes its
// record without locks and without the book ever reallocating under it.
type recordBook struct {
	cur  []Record   // the chunk being handed out
	used int        // slots of cur handed out
	n    int        // slots handed out in all
	done [][]Record // chunks already full
}

const chunkLen = 1 << 16

func newRecordBook(expected int) *recordBook {
	if expected < 1024 {
		expected = 1024
	}
	return &recordBook{cur: make([]Record, expected)}
}

// take returns the next free slot.
func (b *recordBook) take() *Record {
	if b.used == len(b.cur) {
		b.done = append(b.done, b.cur)
		b.cur, b.used = make([]Record, chunkLen), 0
	}
	r := &b.cur[b.used]
	b.used++
	b.n++
	return r
}

// untake gives back the slot take returned last.
func (b *recordBook) untake() {
	b.used--
	b.n--
	b.cur[b.used] = Record{}
}

// records returns the slots handed out, in arrival order. Call it only once
// every worker is done.
func (b *recordBook) records() []Record {
	if len(b.done) == 0 {
		return b.cur[:b.used:b.used]
	}
	out := make([]Record, 0, b.n)
	for _, c := range b.done {
		out = append(out, c...)
	}
	return append(out, b.cur[:b.used]...)
}
