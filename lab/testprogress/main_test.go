package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// feed reads go test's events from in, printing to out.
func feed(in string) (*state, *bytes.Buffer) {
	var out bytes.Buffer
	s := &state{out: &out, running: map[string]time.Time{}, tests: map[string][]string{}}
	s.read(strings.NewReader(in))
	return s, &out
}

// A test running when its binary died has no fail event of its own: its
// output (the panic) is printed when its package fails, and recapped.
func TestPanicOutputKept(t *testing.T) {
	in := `{"Action":"start","Package":"p/d"}
{"Action":"run","Package":"p/d","Test":"TestDies"}
{"Action":"output","Package":"p/d","Test":"TestDies","Output":"=== RUN   TestDies\n"}
{"Action":"output","Package":"p/d","Test":"TestDies","Output":"panic: Log in goroutine after TestOther has completed\n"}
{"Action":"output","Package":"p/d","Output":"FAIL\tp/d\t0.3s\n"}
{"Action":"fail","Package":"p/d"}
`
	s, out := feed(in)
	s.writeRecap()
	got := out.String()
	for _, want := range []string{"panic: Log in goroutine", "FAILED p/d TestDies (did not finish)"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if len(s.tests) != 0 {
		t.Errorf("buffers left: %v", s.tests)
	}
}

// A passing package prints only its closing line, as go test does; a failing
// test's output is printed; lines that are not events pass through.
func TestFormat(t *testing.T) {
	in := `{"Action":"start","Package":"p/a"}
{"Action":"run","Package":"p/a","Test":"TestOK"}
{"Action":"output","Package":"p/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"p/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"p/a","Test":"TestOK"}
{"Action":"output","Package":"p/a","Output":"PASS\n"}
{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t0.1s\n"}
{"Action":"pass","Package":"p/a"}
{"Action":"start","Package":"p/b"}
{"Action":"output","Package":"p/b","Test":"TestBad","Output":"    b_test.go:9: wrong answer\n"}
{"Action":"output","Package":"p/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"p/b","Test":"TestBad"}
{"Action":"output","Package":"p/b","Output":"FAIL\tp/b\t0.2s\n"}
{"Action":"fail","Package":"p/b"}
# p/c
not json: a build error
`
	s, out := feed(in)
	got := out.String()
	want := "ok  \tp/a\t0.1s\n    b_test.go:9: wrong answer\n--- FAIL: TestBad (0.00s)\nFAIL\tp/b\t0.2s\n# p/c\nnot json: a build error\n"
	if got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if !s.failed || s.done != 2 || len(s.running) != 0 {
		t.Fatalf("failed %v done %d running %v", s.failed, s.done, s.running)
	}
	out.Reset()
	s.writeRecap()
	wantRecap := "testprogress: 1 failed tests:\nFAILED p/b TestBad\n  |     b_test.go:9: wrong answer\n  | --- FAIL: TestBad (0.00s)\n"
	if out.String() != wantRecap {
		t.Fatalf("recap\n%q\nwant\n%q", out.String(), wantRecap)
	}
}
