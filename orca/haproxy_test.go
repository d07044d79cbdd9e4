package orca

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// reporterWith returns a Reporter of one model whose capacity mu(B_max)
// is capacity rows/s (B_max 10, tau(10) = 10000/capacity ms), or unknown
// when capacity is 0.
func reporterWith(capacity float64) *Reporter {
	m := Model{Name: "m", RatePerSec: 50, BatchSize: 4, MaxBatch: 10, Instances: 1}
	if capacity > 0 {
		m.LineKnown = true
		m.Latency = batchcost.Latency{Tau0Ms: 10000 / capacity}
	}
	return New(Options{Models: func() []Model { return []Model{m} }})
}

func TestAgentReply(t *testing.T) {
	for _, tc := range []struct {
		capacity, full float64
		want           string
	}{
		{500, 1000, "up 50%\n"},
		{1000, 1000, "up 100%\n"},
		{2000, 1000, "up 200%\n"},
		{114.5, 114.5, "up 100%\n"},
		{57.25, 114.5, "up 50%\n"},
		{0.001, 1000, "up 1%\n"}, // never 0%, which drains the server
		{1e9, 1, "up 25600%\n"},  // HAProxy's bound
		{0, 1000, "up\n"},        // no line learnt: keep HAProxy's weight
		{500, 0, "up\n"},         // no reference: no weight
		{500, -3, "up\n"},
	} {
		if got := reporterWith(tc.capacity).AgentReply(tc.full); got != tc.want {
			t.Errorf("capacity %v, full %v: %q, want %q", tc.capacity, tc.full, got, tc.want)
		}
	}
}

// ServeAgent answers each connection with one line and closes it, also
// when the client sends its agent-send string first.
func TestServeAgent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reporterWith(500).ServeAgent(ctx, ln, 1000) }()
	for _, send := range []string{"", "hello\n"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if send != "" {
			io.WriteString(c, send)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c) // to the server's close
		c.Close()
		if err != nil || string(b) != "up 50%\n" {
			t.Errorf("sent %q: read %q, %v; want \"up 50%%\\n\" then EOF", send, b, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeAgent after cancel: %v", err)
	}
	if err := reporterWith(500).ServeAgent(context.Background(), ln, 0); err == nil {
		t.Error("full capacity 0 accepted")
	}
}

// HAProxy's own agent check sets the server's weight from the reply: a
// server line of weight 100 and a replica at half the full capacity gets
// weight 50.
func TestHAProxyAgentCheck(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed (apt-get install haproxy): the end-to-end agent check is not run")
	}
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	// The "server": a listener HAProxy's TCP check can connect to.
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	agent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go reporterWith(500).ServeAgent(ctx, agent, 1000)
	_, agentPort, _ := net.SplitHostPort(agent.Addr().String())
	front, stats := free(), free()
	cfg := fmt.Sprintf(`global
  maxconn 100
defaults
  mode http
  timeout connect 1s
  timeout client 5s
  timeout server 5s
frontend stats
  bind %s
  stats enable
  stats uri /stats
frontend fe
  bind %s
  default_backend be
backend be
  server s1 %s weight 100 check inter 100ms agent-check agent-port %s agent-inter 100ms
`, stats, front, srv.Addr(), agentPort)
	dir := t.TempDir()
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "-db", "-f", path)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		if w, err := statsWeight(stats, "be", "s1"); err == nil {
			last = w
			if w == "50" {
				return
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, not a wait for luck
	}
	t.Fatalf("HAProxy's weight of s1 is %q after 20 s, want 50 (agent said \"up 50%%\" of weight 100); haproxy said:\n%s", last, logs.String())
}

// statsWeight reads a server's current weight from HAProxy's CSV stats.
func statsWeight(addr, backend, server string) (string, error) {
	resp, err := http.Get("http://" + addr + "/stats;csv")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	r := csv.NewReader(br)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return "", fmt.Errorf("stats csv: %v", err)
	}
	col := -1
	for i, h := range rows[0] {
		if strings.TrimPrefix(strings.TrimSpace(h), "# ") == "weight" {
			col = i
		}
	}
	for _, row := range rows[1:] {
		if col >= 0 && len(row) > col && row[0] == backend && row[1] == server {
			return row[col], nil
		}
	}
	return "", fmt.Errorf("no row %s/%s", backend, server)
}

// A report that panics while an agent check is answered closes that
// connection and is counted; the agent keeps answering the next ones.
func TestServeAgentContainsPanics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	r := New(Options{MaxAge: -1, Models: func() []Model {
		if calls.Add(1) == 1 {
			panic("injected")
		}
		return reporterWith(500).o.Models()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.ServeAgent(ctx, ln, 1000) }()
	before := guard.Count("haproxy_agent")
	for i, want := range []string{"", "up 50%\n"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != want {
			t.Errorf("check %d: read %q, want %q", i, b, want)
		}
	}
	if got := guard.Count("haproxy_agent") - before; got != 1 {
		t.Errorf("panics counted at haproxy_agent: %d, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeAgent after cancel: %v", err)
	}
}
