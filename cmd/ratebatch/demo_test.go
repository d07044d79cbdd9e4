package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/loadgen"
	"github.com/ratebatch/ratebatch/report"
)

func TestDemoComparesPoliciesEndToEnd(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"demo", "--speedup", "300", "--policies", "batchmonitor,adhoc", "--out", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	text := out.String()
	for _, want := range []string{"| batchmonitor |", "| adhoc |", "latency.svg", "batch_size.svg", "requests_per_joule.svg"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	// The files the report command reads back.
	for _, pol := range []string{"batchmonitor", "adhoc"} {
		f, err := os.Open(filepath.Join(dir, pol+".load.csv"))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := loadgen.ReadCSV(f)
		f.Close()
		if err != nil || len(recs) == 0 {
			t.Fatalf("%s load CSV: %d records, %v", pol, len(recs), err)
		}
		f, err = os.Open(filepath.Join(dir, pol+".samples.csv"))
		if err != nil {
			t.Fatal(err)
		}
		smp, err := report.ReadSamplesCSV(f)
		f.Close()
		if err != nil || len(smp) == 0 {
			t.Fatalf("%s samples: %d, %v", pol, len(smp), err)
		}
		last := smp[len(smp)-1]
		if last.TotalRequestsPerJoule == nil || *last.TotalRequestsPerJoule <= 0 {
			t.Fatalf("%s: no requests per joule at the end of the run", pol)
		}
		if last.RowsSent != int64(len(recs)) {
			t.Fatalf("%s: proxy sent %d rows upstream for %d requests", pol, last.RowsSent, len(recs))
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "latency.svg"))
	if err != nil || !bytes.HasPrefix(bytes.TrimSpace(svg), []byte("<svg")) && !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("latency.svg is not an SVG: %v", err)
	}
}

func TestDemoRejectsUnknownPolicy(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--policies", "fastest", "--out", t.TempDir()}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "unknown policy") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
