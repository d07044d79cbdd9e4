package timing_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// TestLoneClientWithoutKeepAlive is one sequential client that opens a
// new connection per call (net/http with DisableKeepAlives: curl in a
// shell loop, requests.post without a Session), with and without think
// time, straight to the emulator and through the proxy's default policy
// in alternating rounds (ad-hoc's arm beside them, logged). /status
// shows it as what it is, one closed-loop caller with no partner to wait
// for, and no call waits in the proxy's queue. With RATEBATCH_LONG (a
// quiet machine, 1,000 calls an arm) its p99 through the proxy is within
// 1.2x (+0.5 ms) of direct's; the short run logs the ratio, which on a
// shared machine is its scheduling noise.
func TestLoneClientWithoutKeepAlive(t *testing.T) {
	timing(t)
	rounds, per := 12, 25
	if servertest.Long() {
		rounds, per = 40, 25
	}
	for _, think := range []time.Duration{0, 15 * time.Millisecond} {
		t.Run(fmt.Sprintf("think %v", think), func(t *testing.T) {
			em, _ := learnServer(t, 11)
			def := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.Policy.Window = time.Second })
			adhoc := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.Policy.Window = time.Second; c.Policy.Name = "adhoc" })
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			body := []byte(`{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},` +
				`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`)
			call := func(base string) time.Duration {
				t0 := time.Now()
				resp, err := client.Post(base+"/v2/models/simple/infer", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d, %v", base, resp.StatusCode, err)
				}
				return time.Since(t0)
			}
			arms := []struct{ name, base string }{{"direct", "http://" + em.Addr()}, {"default", def.Base}, {"adhoc", adhoc.Base}}
			lat := map[string][]time.Duration{}
			var st dispatcher.SourceStats
			for r := range rounds {
				for i := range arms {
					a := arms[(i+r)%len(arms)] // alternate which arm goes first
					for range per {
						lat[a.name] = append(lat[a.name], call(a.base))
						time.Sleep(think)
					}
					if a.name == "default" {
						st = sources(t, def.Admin) // within SourceIdleFor of its calls
					}
				}
			}
			pct := func(k string, p int) float64 {
				v := slices.Clone(lat[k])
				slices.Sort(v)
				return ms(v[(len(v)*p+99)/100-1])
			}
			direct, proxied := pct("direct", 99), pct("default", 99)
			for _, a := range arms {
				t.Logf("think %v, %s: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms", think, a.name, pct(a.name, 50), pct(a.name, 90), pct(a.name, 99))
			}
			t.Logf("p99 default/direct %.2fx, default/adhoc %.2fx; sources %+v", proxied/direct, proxied/pct("adhoc", 99), st)
			if !st.Lone || st.Population != 1 || st.ClosedLoop != 1 || st.Partners != 0 {
				t.Errorf("/status sources %+v: want a lone closed-loop caller without partners", st)
			}
			if servertest.Long() && proxied > 1.2*direct+0.5 {
				t.Errorf("p99 through the default %.3f ms, direct %.3f ms: want at most 1.2x + 0.5 ms", proxied, direct)
			}
			// The tails above are the machine's as much as the proxy's;
			// the proxy's own part is its queue wait: no call held.
			if n, held := queuedOver(t, def, 0.0016); held > n/100 {
				t.Errorf("%d of %d calls waited in the proxy's queue over 1.6 ms, want at most 1%%", held, n)
			}
		})
	}
}

// queuedOver returns how many calls the proxy has sent and how many of
// them waited in its queue longer than the bucket bound le (seconds) of
// ratebatch_queue_wait_seconds.
func queuedOver(t *testing.T, p *servertest.Proxy, le float64) (n, over uint64) {
	t.Helper()
	fams, err := p.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() != "ratebatch_queue_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			n += h.GetSampleCount()
			under := uint64(0)
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() <= le {
					under = b.GetCumulativeCount()
				}
			}
			over += h.GetSampleCount() - under
		}
	}
	if n == 0 {
		t.Fatal("no queue wait observed")
	}
	return n, over
}

// sources is the simple model's callers as the proxy's /status shows them.
func sources(t *testing.T, admin string) dispatcher.SourceStats {
	t.Helper()
	resp, err := http.Get(admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Queues []dispatcher.Snapshot `json:"queues"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, q := range st.Queues {
		if q.Model == "simple" {
			return q.Sources
		}
	}
	t.Fatal("no queue for simple in /status")
	return dispatcher.SourceStats{}
}
