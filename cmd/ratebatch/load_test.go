package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// load's runs against a server are tested beside the package that does
// them (lab/loadgen); here, how the flags reach it.

func TestLoadUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--model", "m", "--rate", "1", "--duration", "1s"}, "--target"},
		{[]string{"--target", "http://127.0.0.1:1", "--rate", "1", "--duration", "1s"}, "--model"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--duration", "1s"}, "--rate RPS or --trace"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--trace", "paper300"}, "only one of"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1"}, "give --duration"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "-5", "--duration", "1s"}, "--rate must be > 0"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--trace", "nope"}, `unknown trace "nope"`},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--trace", "paper300", "--speedup", "0"}, "--speedup"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--speedup", "2"}, "need --trace"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--on-full", "queue"}, "--on-full must be"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--rows", "0"}, "--rows"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--warmup", "-1s"}, "--warmup must be >= 0"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--trace", "paper300", "--find-rate-p99", "15ms"}, "--find-rate-p99 needs"},
		{[]string{"--target", "http://127.0.0.1:1", "--model", "m", "--rate", "1", "--duration", "1s", "--find-rate-p99", "0s"}, "--find-rate-p99 needs"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"load"}, tt.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errb.String(), tt.want)
			}
		})
	}
}

// goneURL is the address of a server that is no longer there.
func goneURL() string {
	srv := httptest.NewServer(nil)
	srv.Close()
	return srv.URL
}

// A server that is not there is a run error (exit 1) naming the metadata
// request, not a panic or a silent zero summary.
func TestLoadUnreachableTarget(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"load", "--target", goneURL(), "--model", "simple", "--rate", "10", "--duration", "1s"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "model metadata") {
		t.Fatalf("exit %d, stderr %q; want 1 and a metadata error", code, errb.String())
	}
}

// --cpuprofile leaves a CPU profile of the run that pprof can read, even
// of a run that failed.
func TestLoadCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load.cpu")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"load", "--target", goneURL(), "--model", "simple", "--rate", "500", "--duration", "300ms", "--cpuprofile", path}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (no server): %s", code, errb.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A CPU profile is a gzip-compressed protocol buffer.
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("--cpuprofile did not write a gzip-compressed profile: %v", err)
	}
	if b, err := io.ReadAll(zr); err != nil || len(b) == 0 {
		t.Fatalf("--cpuprofile: %d bytes of profile, %v", len(b), err)
	}
}
