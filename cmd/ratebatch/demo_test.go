package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDemoRejectsUnknownPolicy(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--policies", "fastest", "--out", t.TempDir()}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "unknown policy") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
