package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestEmulateFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown preset", []string{"--preset", "nope"}, `unknown preset "nope"`},
		{"negative scale", []string{"--tau-scale", "-1"}, "time scale"},
		{"jitter too large", []string{"--jitter", "1.5"}, "jitter"},
		{"idle power without energy figures", []string{"--preset", "resnet101-titanrtx", "--idle-watts", "50"}, "no published energy figures"},
		{"empty listen", []string{"--listen", ""}, "--listen"},
		{"not a number", []string{"--instances", "two"}, "invalid value"},
		{"stray argument", []string{"extra"}, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"emulate", "--listen", "127.0.0.1:0", "--metrics-listen", ""}, tt.args...), &out, &errb)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Errorf("stderr %q does not mention %q", errb.String(), tt.want)
			}
		})
	}
}

func TestEmulateListenError(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"emulate", "--listen", "127.0.0.1:notaport", "--metrics-listen", ""}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "listen") {
		t.Errorf("exit %d, stderr %q; want 1 naming the listen failure", code, errb.String())
	}
}
