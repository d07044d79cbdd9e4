package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunDispatch(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"help lists commands", []string{"help"}, 0, "version"},
		{"unknown command", []string{"nope"}, 2, `unknown command "nope"`},
		{"version", []string{"version"}, 0, "ratebatch "},
		{"stray argument", []string{"version", "x"}, 2, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tt.args, &out, &errb)
			if code != tt.wantCode {
				t.Fatalf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, errb.String())
			}
			if got := out.String() + errb.String(); !strings.Contains(got, tt.wantOut) {
				t.Fatalf("output %q does not contain %q", got, tt.wantOut)
			}
		})
	}
}
