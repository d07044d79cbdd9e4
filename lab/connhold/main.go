// Command connhold measures what connections and requests cost a server in
// memory: it reads the server's resident set size (VmRSS in /proc) at rest,
// with many idle keep-alive connections open, and at its peak while many
// requests are in flight at once. scripts/bench-memory.sh runs it against
// `ratebatch serve`; the figures are recorded in docs/results/benchmarks.md,
// "Memory per connection and per request in flight".
//
// It speaks raw HTTP/1.1 over TCP so that its own connections cost it
// little, and it checks every answer's status: a run in which any request
// failed is reported as failed, not measured.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/lab/procmem"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "connhold:", err)
		os.Exit(1)
	}
}

// Result is what one run measured; sizes are KiB of the server's RSS.
type Result struct {
	IdleConns      int     `json:"idle_conns"`
	InFlight       int     `json:"in_flight"`
	RestKiB        int64   `json:"rest_kib"`
	IdleKiB        int64   `json:"idle_kib"`
	PerIdleConnKiB float64 `json:"per_idle_conn_kib"`
	InFlightPeak   int64   `json:"in_flight_peak_kib"`
	PerRequestKiB  float64 `json:"per_in_flight_request_kib"`
	InFlightSecs   float64 `json:"in_flight_s"`
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("connhold", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9000", "server address (host:port)")
	pid := fs.Int("pid", 0, "the server's process id, whose VmRSS is read (required)")
	idle := fs.Int("idle", 10000, "idle keep-alive connections to open and hold")
	inflight := fs.Int("inflight", 1000, "requests sent at once, each on its own connection")
	path := fs.String("path", "/v2/models/simple/infer", "path of the in-flight requests (POST)")
	body := fs.String("body", simpleBody, "JSON body of the in-flight requests")
	settle := fs.Duration("settle", 2*time.Second, "wait before reading RSS, so the runtime has settled")
	timeout := fs.Duration("timeout", 60*time.Second, "bound of each phase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pid <= 0 {
		return errors.New("-pid is required: the server process whose memory is measured")
	}
	var res Result
	res.IdleConns, res.InFlight = *idle, *inflight
	var err error
	time.Sleep(*settle)
	if res.RestKiB, err = rss(*pid); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	conns, err := openIdle(ctx, *addr, *idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return fmt.Errorf("opening %d idle connections: %w", *idle, err)
	}
	time.Sleep(*settle)
	if res.IdleKiB, err = rss(*pid); err != nil {
		return err
	}
	if *idle > 0 {
		res.PerIdleConnKiB = float64(res.IdleKiB-res.RestKiB) / float64(*idle)
	}

	// The in-flight phase runs with the idle connections still open, as a
	// busy server would see it.
	ctx2, cancel2 := context.WithTimeout(context.Background(), *timeout)
	defer cancel2()
	start := time.Now()
	peak, err := burst(ctx2, *addr, *path, *body, *inflight, *pid)
	if err != nil {
		return fmt.Errorf("%d requests in flight: %w", *inflight, err)
	}
	res.InFlightSecs = time.Since(start).Seconds()
	res.InFlightPeak = peak
	if *inflight > 0 {
		res.PerRequestKiB = float64(peak-res.IdleKiB) / float64(*inflight)
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(res)
}

// simpleBody is one row of the emulator's (and Triton's example) "simple".
const simpleBody = `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},` +
	`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`

// openIdle opens n connections, makes one request on each so that the
// server has served it (and holds it as an idle keep-alive connection), and
// returns them open.
func openIdle(ctx context.Context, addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	var d net.Dialer
	req := []byte("GET /v2/health/live HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
	const parallel = 64
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				err = roundTrip(ctx, c, req)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if c != nil {
					c.Close()
				}
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	return conns, firstErr
}

// burst sends n POSTs at once, one per new connection, and samples the
// server's RSS until every answer is in; it returns the peak.
func burst(ctx context.Context, addr, path, body string, n, pid int) (int64, error) {
	var d net.Dialer
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return 0, err
		}
		conns = append(conns, c)
	}
	req := []byte("POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	errs := make(chan error, n)
	start := make(chan struct{})
	for _, c := range conns {
		go func() {
			<-start
			errs <- roundTrip(ctx, c, req)
		}()
	}
	peak, err := rss(pid)
	if err != nil {
		return 0, err
	}
	close(start)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var firstErr error
	for done := 0; done < n; {
		select {
		case e := <-errs:
			done++
			if e != nil && firstErr == nil {
				firstErr = e
			}
		case <-tick.C:
			if v, err := rss(pid); err == nil && v > peak {
				peak = v
			}
		case <-ctx.Done():
			return peak, ctx.Err()
		}
	}
	return peak, firstErr
}

// roundTrip writes req and reads one answer, which must be 200.
func roundTrip(ctx context.Context, c net.Conn, req []byte) error {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
		defer c.SetDeadline(time.Time{})
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	r := textproto.NewReader(bufio.NewReader(c))
	status, err := r.ReadLine()
	if err != nil {
		return fmt.Errorf("reading the status line: %w", err)
	}
	hdr, err := r.ReadMIMEHeader()
	if err != nil {
		return fmt.Errorf("reading headers: %w", err)
	}
	n, err := strconv.Atoi(hdr.Get("Content-Length"))
	if err != nil {
		return fmt.Errorf("answer without a Content-Length (%q): %w", status, err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.R, b); err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		return fmt.Errorf("answer %q: %s", status, bytes.TrimSpace(b))
	}
	return nil
}

// rss reads VmRSS of a process in KiB.
func rss(pid int) (int64, error) { return procmem.KiB(pid, "VmRSS") }
