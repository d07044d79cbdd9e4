package server

import (
	"os"
	"path/filepath"
	"testing"
)

// The decision log is written where DecisionLogEnv says, or, without it,
// where its earlier name says; neither set, there is none.
func TestDecisionLogEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		file string // "" : no log
	}{
		{"neither", nil, ""},
		{"the name", map[string]string{DecisionLogEnv: "a.log"}, "a.log"},
		{"the earlier name", map[string]string{decisionLogEnvOld: "b.log"}, "b.log"},
		{"both: the name wins", map[string]string{DecisionLogEnv: "a.log", decisionLogEnvOld: "b.log"}, "a.log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(DecisionLogEnv, "")
			t.Setenv(decisionLogEnvOld, "")
			for k, v := range tt.env {
				t.Setenv(k, filepath.Join(dir, v))
			}
			log, f, err := openDecisionLog()
			if err != nil {
				t.Fatal(err)
			}
			if tt.file == "" {
				if log != nil || f != nil {
					t.Fatalf("a decision log was opened without either variable: %v", f.Name())
				}
				return
			}
			if log == nil || f == nil {
				t.Fatal("no decision log opened")
			}
			defer f.Close()
			if f.Name() != filepath.Join(dir, tt.file) {
				t.Fatalf("decision log at %s, want %s", f.Name(), filepath.Join(dir, tt.file))
			}
			if _, err := os.Stat(f.Name()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
