package power

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A Triton source that yields no figure (a CPU host: no GPU series), then
// does (a GPU appears), then fails for a poll and for good: the snapshot
// says available false with the reason and the fallback objective, the
// gauge reads 0, a WARN says so once; one failed poll after measuring is a
// hiccup, dryPolls in a row are not; each recovery is an INFO.
func TestMeterSaysWhenItDoesNotMeasure(t *testing.T) {
	fake, url := startTriton(t)
	clock := newFakeClock()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	src, err := Open(KindTriton, Options{TritonMetricsURL: url, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMeter(src, Options{Interval: time.Second, Windows: []time.Duration{10 * time.Second}, Now: clock.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	poll := func(n int) {
		t.Helper()
		for range n {
			m.Poll(context.Background())
			clock.Advance(time.Second)
		}
	}
	expect := func(what string, avail bool, why string, warns, infos int) {
		t.Helper()
		s := m.Snapshot()
		if s.Available != avail || m.Available() != avail || !strings.Contains(s.Unavailable, why) || (avail && s.Unavailable != "") {
			t.Errorf("%s: available %v (%v), unavailable %q; want %v saying %q", what, s.Available, m.Available(), s.Unavailable, avail, why)
		}
		want := 0
		if avail {
			want = 1
		}
		checkAvailable(t, m, want)
		if w, i := strings.Count(logs.String(), "level=WARN"), strings.Count(logs.String(), "level=INFO"); w != warns || i != infos {
			t.Errorf("%s: %d WARN and %d INFO lines, want %d and %d; log:\n%s", what, w, i, warns, infos, logs.String())
		}
	}
	expect("before the first poll", false, "not read yet", 0, 0)
	poll(5)
	expect("no GPU series", false, "has no nv_energy_consumption or nv_gpu_power_usage series", 1, 0)
	if !strings.Contains(logs.String(), "optimise requests per GPU-second instead of per joule") {
		t.Errorf("the WARN does not say what the policies do instead:\n%s", logs.String())
	}
	fake.set(tritonGPU{"GPU-1", nil, f64(70)})
	poll(1)
	expect("a GPU's power", true, "", 1, 1)
	fake.setStatus(http.StatusInternalServerError)
	poll(dryPolls - 1)
	expect("a hiccup", true, "", 1, 1)
	poll(1)
	expect("the endpoint failing", false, "status 500", 2, 1)
	fake.setStatus(0)
	poll(1)
	expect("back", true, "", 2, 2)
}

// Without a source the meter says so, and logs nothing: none is a choice.
func TestMeterNoneIsUnavailable(t *testing.T) {
	var logs bytes.Buffer
	m, err := NewMeter(None{}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.Poll(context.Background())
	if s := m.Snapshot(); s.Available || !strings.Contains(s.Unavailable, "no energy source") {
		t.Errorf("none: available %v, unavailable %q", s.Available, s.Unavailable)
	}
	if logs.Len() != 0 {
		t.Errorf("none logged %q", logs.String())
	}
}
