package orca

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
)

// HAProxy cannot read ORCA headers; what it reads of a server's load is
// its agent check: it connects to an agent port of each server every
// `inter`, reads one line ("up 57%") and sets the server's weight to that
// percentage of the weight its `server` line gives (at most 256). The
// replica's weight here is the one ORCA's weighted round robin gives it,
// rps / utilization, which is its capacity mu(B_max) at the current mix of
// models (named metric capacity_rps): expressed as a percentage of a
// capacity the operator names (FullRPS, one the fleet's replicas share),
// replicas of unequal speed get weights in proportion to their speeds, as
// grpc-go's and Envoy's ORCA weights do.

// AgentReply is the line an agent-check answer carries: "up N%" where N is
// 100 * capacity / fullRPS rounded, at least 1 (0% would drain the server)
// and at most 25600 (HAProxy's own bound; it caps the weight at 256), or
// "up" alone while the capacity is unknown (no learnt line yet), which
// keeps the weight HAProxy has. fullRPS must be > 0.
func (r *Reporter) AgentReply(fullRPS float64) string {
	c, ok := r.load().proto.NamedMetrics[MetricCapacityRPS]
	if !ok || !(c > 0) || !(fullRPS > 0) {
		return "up\n"
	}
	pct := math.Round(100 * c / fullRPS)
	pct = min(max(pct, 1), 25600)
	return fmt.Sprintf("up %d%%\n", int(pct))
}

// agentConns bounds the agent connections answered at once; more wait in
// the listener's backlog.
const agentConns = 64

// ServeAgent answers HAProxy's agent checks on ln with AgentReply(fullRPS)
// until ctx ends or ln is closed (then it returns nil). Each connection
// gets the line, the write side is closed, and whatever HAProxy sent
// (its optional agent-send string) is read and dropped for at most a
// second, so that closing never resets a reply HAProxy has not read.
func (r *Reporter) ServeAgent(ctx context.Context, ln net.Listener, fullRPS float64) error {
	if !(fullRPS > 0) {
		return fmt.Errorf("haproxy agent: full capacity must be > 0 rows/s, got %v", fullRPS)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	slots := make(chan struct{}, agentConns)
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			// A transient error (out of file descriptors): wait, retry.
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			defer c.Close()
			// The reply computes the report: a panic there closes this
			// connection, not the process (HAProxy keeps the weight it has).
			defer func() {
				if v := recover(); v != nil {
					guard.Recovered(nil, "haproxy_agent", v)
				}
			}()
			answerAgent(c, r.AgentReply(fullRPS))
		}()
	}
}

// answerAgent writes line to c; the caller closes c.
func answerAgent(c net.Conn, line string) {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, line); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		io.Copy(io.Discard, io.LimitReader(c, 4096))
	}
}
