package server_test

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// TestSecurityAdminPort: the admin port is as closed as the data port.
// The profiler asks for the token; its cmdline shows the command line
// with the token given as a flag masked; a request naming the port by a
// name it does not go by (DNS rebinding: evil.example resolving to
// 127.0.0.1) gets 421 and nothing else; the URLs of the configuration are
// shown in /status, and written in the log, without their credentials.
func TestSecurityAdminPort(t *testing.T) {
	const (
		token   = "tok-3e23e8160039594a33894f6564e1b134"
		otelPw  = "otelpw-a9993e364706816aba3e25717850c26c"
		metrics = "metricstok-84983e441c3bd26ebaae4aa1f95129e5"
	)
	args := os.Args
	os.Args = append(slices.Clone(args), "--admin-token", token)
	t.Cleanup(func() { os.Args = args })
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	em := emulatortest.Start(t, emulator.Options{})
	lt := servertest.Start(t, em.Addr(), log, func(c *config.Config) {
		c.AdminToken, c.AdminPprof, c.Log.Level = token, true, "debug"
		// Nothing listens at either: exporting and scraping fail, and
		// say so in the log.
		c.Tracing.OTLPEndpoint = "http://otel:" + otelPw + "@127.0.0.1:9"
		c.Power.Source, c.Power.MetricsURL = "triton", "http://127.0.0.1:9/metrics?token="+metrics
	})
	get := func(path, host, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, lt.Admin+path, nil)
		if host != "" {
			req.Host = host
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2"} {
		if code, body := get(path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d %.80q, want 401", path, code, body)
		}
	}
	code, cmdline := get("/debug/pprof/cmdline", "", "Bearer "+token)
	if code != http.StatusOK || strings.Contains(cmdline, token) || !strings.Contains(cmdline, "--admin-token\x00REDACTED") {
		t.Errorf("cmdline with the token: %d %q; want the token given as a flag masked", code, cmdline)
	}
	for _, host := range []string{"evil.example", "evil.example:" + portOf(lt.Admin)} {
		for _, path := range []string{"/status", "/metrics", "/ui", "/debug/pprof/"} {
			code, body := get(path, host, "Bearer "+token)
			if code != http.StatusMisdirectedRequest || strings.Contains(body, "ratebatch_") || strings.Contains(body, `"queues"`) {
				t.Errorf("GET %s, Host %s: %d %.80q, want 421 and nothing of the admin port", path, host, code, body)
			}
		}
	}
	if code, _ := get("/status", "localhost:"+portOf(lt.Admin), ""); code != http.StatusOK {
		t.Errorf("GET /status, Host localhost: %d, want 200", code)
	}

	post(t, lt.Base+"/v2/models/simple/infer", simpleBody("a", 1, 1)) // a span to export
	var status string
	testpoll.Until(t, "the meter's failed scrape shown in /status", func() bool {
		_, status = get("/status", "", "")
		return strings.Contains(status, "scraping")
	})
	lt.Stop()
	for what, text := range map[string]string{"logs": logs.String(), "/status": status} {
		for name, secret := range map[string]string{"admin token": token, "OTLP password": otelPw, "metrics token": metrics} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s appears in the %s", name, what)
			}
		}
	}
	for _, want := range []string{`"otlp_endpoint": "http://REDACTED@127.0.0.1:9"`, `"metrics_url": "http://127.0.0.1:9/metrics?token=REDACTED"`} {
		if !strings.Contains(status, want) {
			t.Errorf("/status lacks %s", want)
		}
	}
}

func portOf(base string) string { return base[strings.LastIndexByte(base, ':')+1:] }
