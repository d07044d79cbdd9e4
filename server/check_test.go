package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// checkVerdict is the bound docs/RELIABILITY.md states for the active
// health check at its default interval (1 s): two intervals.
const checkVerdict = 2 * time.Second

// serverDoors reports what the proxy's server-wide readiness doors say, as
// a kubelet or a balancer reads them: the admin /readyz, the data port's
// /v2/health/ready and grpc.health.v1 on the gRPC door.
func serverDoors(t *testing.T, lt *servertest.Proxy, health healthpb.HealthClient) [3]bool {
	t.Helper()
	c := newClient()
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	hc, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	return [3]bool{getStatus(c, lt.Admin+"/readyz") == 200, getStatus(c, lt.Base+"/v2/health/ready") == 200,
		err == nil && hc.GetStatus() == healthpb.HealthCheckResponse_SERVING}
}

// The upstream killed with no client traffic at all: every server-wide
// readiness door turns not ready within 2 s, ratebatch_upstream_down reads
// 1 and a WARN says so; back within 2 s of the upstream's return, with an
// INFO. Then one model unloaded: the model is not ready in /status and the
// metrics, and with it the only batched model, the proxy is not ready.
func TestReadinessWatchesTheUpstreamWithoutTraffic(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	addr, metricsAddr := em.Addr(), em.MetricsAddr()
	logs := &syncBuffer{}
	lt := servertest.Start(t, addr, slog.New(slog.NewTextHandler(logs, nil)), func(c *config.Config) {
		c.GRPCListen = "127.0.0.1:0"
		onlySimple(c, em)
	})
	if got := lt.Config().Upstreams.HealthCheckInterval; got != time.Second {
		t.Fatalf("health_check_interval %v, want the default 1s the bound is stated for", got)
	}
	cc, err := grpc.NewClient("passthrough:///"+lt.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	allOf := func(want bool) func() bool {
		return func() bool { r := serverDoors(t, lt, health); return r == [3]bool{want, want, want} }
	}
	testpoll.Until(t, "every door ready", allOf(true))

	em.Close()
	took := testpoll.Within(t, "every door not ready after the upstream died", checkVerdict, allOf(false))
	if _, m := getText(t, lt.Admin+"/metrics"); metricValue(m, "ratebatch_upstream_down") != 1 {
		t.Error("ratebatch_upstream_down is not 1 with the upstream dead")
	}
	if code, body := getText(t, lt.Admin+"/readyz"); code != 503 || !strings.Contains(body, "refusing connections") {
		t.Errorf("/readyz %d %s, want 503 naming the refused connections", code, body)
	}
	logged(t, logs, `level=WARN msg="upstream refusing connections`)
	if err := em.Start(addr, metricsAddr); err != nil {
		t.Fatalf("restarting the upstream: %v", err)
	}
	back := testpoll.Within(t, "every door ready after the upstream's return", checkVerdict, allOf(true))
	logged(t, logs, `level=INFO msg="upstream answering again"`)
	t.Logf("not ready %v after the kill, ready %v after the return", took.Round(time.Millisecond), back.Round(time.Millisecond))

	if err := em.SetModelReady("simple", false); err != nil {
		t.Fatal(err)
	}
	testpoll.Within(t, "not ready with the only batched model unloaded", checkVerdict, allOf(false))
	if _, m := getText(t, lt.Admin+"/metrics"); metricValue(m, `ratebatch_upstream_model_ready{model="simple"}`) != 0 {
		t.Error(`ratebatch_upstream_model_ready{model="simple"} is not 0 with simple unloaded`)
	}
	if _, body := getText(t, lt.Admin+"/status"); !strings.Contains(body, `"simple": "not ready upstream (400`) {
		t.Errorf("/status does not say simple is not ready upstream: %s", body)
	}
	logged(t, logs, `level=WARN msg="model not ready upstream`)
	if err := em.SetModelReady("simple", true); err != nil {
		t.Fatal(err)
	}
	testpoll.Within(t, "ready with simple loaded again", checkVerdict, allOf(true))
}

// logged waits for a log line containing s: the check logs a change just
// after it publishes it.
func logged(t *testing.T, logs *syncBuffer, s string) {
	t.Helper()
	testpoll.Until(t, "a log line with "+s, func() bool { return strings.Contains(logs.String(), s) })
}

// A proxy started against a wrong upstream (nothing listens there): a
// call of a model it would batch gets what docs/RELIABILITY.md promises of
// a refusing upstream, 503 with Retry-After once the hold has passed, not
// a 502 at once; and once the upstream is there, the call goes through.
func TestServeWrongUpstreamHoldsThen503(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	addr, metricsAddr := em.Addr(), em.MetricsAddr()
	em.Close()
	const hold = 500 * time.Millisecond
	lt := servertest.Run(t, addr, nil, func(c *config.Config) { c.Upstreams.Hold = hold })
	start := time.Now()
	code, r, h := post(t, lt.Base+"/v2/models/simple/infer", simpleBody("wrong", 1, 1))
	took := time.Since(start)
	if code != 503 || h.Get("Retry-After") == "" || !strings.Contains(r.Error, "refusing connections") {
		t.Fatalf("wrong upstream: %d %q Retry-After %q; want 503 with Retry-After", code, r.Error, h.Get("Retry-After"))
	}
	if took < hold/2 {
		t.Errorf("answered %v after the call, want after the hold of %v", took, hold)
	}
	if err := em.Start(addr, metricsAddr); err != nil {
		t.Fatalf("starting the upstream: %v", err)
	}
	if code, r, _ := post(t, lt.Base+"/v2/models/simple/infer", simpleBody("right", 1, 1)); code != 200 {
		t.Fatalf("upstream there: %d %q, want 200", code, r.Error)
	}
}
