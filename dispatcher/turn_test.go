package dispatcher

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// countTurn is a Turn that counts what it has handed out.
type countTurn struct {
	mu          sync.Mutex
	held, taken int
}

func (c *countTurn) Take() { c.mu.Lock(); c.held++; c.taken++; c.mu.Unlock() }
func (c *countTurn) Give() { c.mu.Lock(); c.held--; c.mu.Unlock() }
func (c *countTurn) state() (held, taken int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held, c.taken
}

// A call's CopyTurn is held while its body is written upstream, and given
// back once the body is written, before the upstream answers: the
// upstream, having read the whole body, finds the turn free (it would
// wait in vain for a turn held until its answer); each attempt
// takes it afresh, and nothing is left held once the exchange is over.
func TestCopyTurnHeldOnlyWhileWritten(t *testing.T) {
	turn := &countTurn{}
	type seen struct{ held, taken, n int }
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		// The writer gives the turn back once its last bytes are in the
		// socket, which may be after they are read here: wait for it,
		// before answering.
		held, taken := turn.state()
		for deadline := time.Now().Add(10 * time.Second); held != 0 && time.Now().Before(deadline); held, taken = turn.state() {
			time.Sleep(time.Millisecond)
		}
		got <- seen{held, taken, int(n)}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"outputs":[]}`)
	}))
	defer srv.Close()
	u, err := NewHTTPUpstream(srv.URL, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w := &Wire{Body: make([]byte, 2*streamAbove), HeaderLen: 0}
	tb := &turnBody{w: w, turn: turn}
	if _, ok := Body(tb).(interface{ Bytes() []byte }); ok {
		t.Fatal("a turnBody has Bytes: the upstream client would write it without taking the turn")
	}
	for attempt := 1; attempt <= 2; attempt++ {
		reply, err := u.Infer(context.Background(), "m", "", tb, Outgoing{})
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		reply.Free()
		s := <-got
		if s.n != len(w.Body) || s.held != 0 || s.taken != attempt {
			t.Fatalf("attempt %d, the upstream having read %d of %d bytes: turn held %d, taken %d times; want free, taken %d",
				attempt, s.n, len(w.Body), s.held, s.taken, attempt)
		}
	}
	tb.done() // as sendWire does once the exchange is over: nothing to give
	if held, taken := turn.state(); held != 0 || taken != 2 {
		t.Fatalf("after: held %d, taken %d, want 0 and 2", held, taken)
	}
}

// A stream read by Read rather than WriteTo holds the turn from its first
// byte to its end, and done gives back a turn whose stream was abandoned.
func TestCopyTurnReadAndAbandoned(t *testing.T) {
	turn := &countTurn{}
	tb := &turnBody{w: &Wire{Body: make([]byte, 100), HeaderLen: -1}, turn: turn}
	r := tb.Reader()
	buf := make([]byte, 60)
	if _, err := r.Read(buf); err != nil {
		t.Fatal(err)
	}
	if held, _ := turn.state(); held != 1 {
		t.Fatalf("reading: turn held %d, want 1", held)
	}
	tb.done() // the exchange ended before the stream did
	if held, _ := turn.state(); held != 0 {
		t.Fatalf("abandoned: turn held %d, want 0", held)
	}
	r = tb.Reader()
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if held, taken := turn.state(); held != 0 || taken != 2 {
		t.Fatalf("read to its end: turn held %d, taken %d, want 0 and 2", held, taken)
	}
	r.(io.Closer).Close()
	if held, _ := turn.state(); held != 0 {
		t.Fatalf("closed after its end: turn held %d, want 0", held)
	}
}
