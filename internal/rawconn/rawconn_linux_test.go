//go:build linux

package rawconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestDeadlineSet follows one direction's deadline through the calls
// fasthttp makes: the runtime's deadline is moved only when it would fire
// past the time asked for and its slack; an exact one has none.
func TestDeadlineSet(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) time.Time { return now.Add(d) }
	tests := []struct {
		name    string
		exact   bool
		armed   time.Time // the runtime's, before the call
		set     time.Time
		wantArm bool      // the runtime's deadline is changed
		wantAt  time.Time // to this, if changed
	}{
		{"first deadline: armed a slack past it", false, time.Time{}, at(80 * time.Second), true, at(90 * time.Second)},
		{"pushed later within the slack: kept", false, at(90 * time.Second), at(85 * time.Second), false, time.Time{}},
		{"pushed past the armed time: kept, it wakes early", false, at(90 * time.Second), at(120 * time.Second), false, time.Time{}},
		{"moved earlier than the slack allows: re-armed", false, at(135 * time.Second), at(10 * time.Second), true, at(10*time.Second + 10*time.Second/slackShare)},
		{"cleared: kept, it wakes early", false, at(90 * time.Second), time.Time{}, false, time.Time{}},
		{"already past, armed later: applied as asked", false, at(90 * time.Second), at(-time.Second), true, at(-time.Second)},
		{"already past, armed earlier: kept", false, at(-2 * time.Second), at(-time.Second), false, time.Time{}},
		{"exact, first deadline: armed at it", true, time.Time{}, at(80 * time.Second), true, at(80 * time.Second)},
		{"exact, moved earlier within the slack: re-armed at it", true, at(90 * time.Second), at(85 * time.Second), true, at(85 * time.Second)},
		{"exact, pushed past the armed time: kept, it wakes early", true, at(90 * time.Second), at(120 * time.Second), false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deadline{armed: tt.armed, exact: tt.exact}
			var armed []time.Time
			if err := d.set(tt.set, func(at time.Time) error { armed = append(armed, at); return nil }); err != nil {
				t.Fatal(err)
			}
			if !d.want.Equal(tt.set) {
				t.Errorf("want %v, set %v", d.want, tt.set)
			}
			if got := len(armed) == 1; got != tt.wantArm || len(armed) > 1 {
				t.Fatalf("armed %d times, want re-armed %v", len(armed), tt.wantArm)
			}
			if !tt.wantArm {
				if !d.armed.Equal(tt.armed) {
					t.Errorf("armed moved from %v to %v without a call", tt.armed, d.armed)
				}
				return
			}
			// The span is measured from the call's own clock reading.
			if diff := armed[0].Sub(tt.wantAt); diff < -time.Second/slackShare || diff > time.Second/slackShare {
				t.Errorf("armed at %v, want about %v", armed[0].Sub(now), tt.wantAt.Sub(now))
			}
			if !d.armed.Equal(armed[0]) {
				t.Errorf("remembers %v, armed %v", d.armed, armed[0])
			}
		})
	}
}

// TestDeadlineExpired: when the runtime's deadline fails an operation, the
// operation ends only if the deadline asked for has passed.
func TestDeadlineExpired(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name     string
		want     time.Time
		expired  bool
		rearmed  bool
		rearmNil bool // re-armed to no deadline
	}{
		{"asked-for time passed", now.Add(-time.Millisecond), true, false, false},
		{"woken early: re-armed", now.Add(time.Minute), false, true, false},
		{"cleared since: the runtime's cleared too", time.Time{}, false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deadline{want: tt.want, armed: now.Add(-time.Second)}
			var armed []time.Time
			got := d.expired(func(at time.Time) error { armed = append(armed, at); return nil })
			if got != tt.expired {
				t.Errorf("expired = %v, want %v", got, tt.expired)
			}
			if (len(armed) == 1) != tt.rearmed {
				t.Fatalf("armed %v, want re-armed %v", armed, tt.rearmed)
			}
			if tt.rearmed && armed[0].IsZero() != tt.rearmNil {
				t.Errorf("re-armed to %v", armed[0])
			}
			if tt.rearmed && !tt.rearmNil && armed[0].Before(tt.want) {
				t.Errorf("re-armed to %v, before the %v asked for", armed[0], tt.want)
			}
		})
	}
}

// TestDeadlineOnAConnection drives a real connection's read deadline
// through the kept and woken-early paths: a read fails from the time asked
// for on, never before, and bytes that come in time are read.
func TestDeadlineOnAConnection(t *testing.T) {
	t.Run("pushed within the slack", func(t *testing.T) {
		_, s := pair(t)
		start := time.Now()
		s.SetReadDeadline(start.Add(60 * time.Millisecond))
		s.SetReadDeadline(start.Add(64 * time.Millisecond)) // kept
		_, err := s.Read(make([]byte, 1))
		assertTimedOut(t, err, time.Since(start), 64*time.Millisecond)
	})
	t.Run("pushed past the armed time: woken early, waits on", func(t *testing.T) {
		_, s := pair(t)
		start := time.Now()
		s.SetReadDeadline(start.Add(20 * time.Millisecond))
		s.SetReadDeadline(start.Add(150 * time.Millisecond)) // the runtime still fires at 22.5 ms
		_, err := s.Read(make([]byte, 1))
		assertTimedOut(t, err, time.Since(start), 150*time.Millisecond)
	})
	t.Run("bytes after an early wake are read", func(t *testing.T) {
		c, s := pair(t)
		s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		s.SetReadDeadline(time.Now().Add(time.Hour))
		go func() { time.Sleep(80 * time.Millisecond); c.Write([]byte{7}) }()
		b := make([]byte, 1)
		if n, err := s.Read(b); n != 1 || err != nil || b[0] != 7 {
			t.Errorf("read = %d, %v, %v; want the byte written at 80 ms", n, err, b)
		}
	})
	t.Run("cleared after an early wake", func(t *testing.T) {
		c, s := pair(t)
		s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		s.SetReadDeadline(time.Time{})
		go func() { time.Sleep(80 * time.Millisecond); c.Write([]byte{7}) }()
		if n, err := s.Read(make([]byte, 1)); n != 1 || err != nil {
			t.Errorf("read = %d, %v; want the byte written at 80 ms", n, err)
		}
	})
	t.Run("write deadline", func(t *testing.T) {
		_, s := pair(t)
		start := time.Now()
		s.SetWriteDeadline(start.Add(20 * time.Millisecond))
		s.SetWriteDeadline(start.Add(100 * time.Millisecond))
		var err error
		for err == nil { // fills the socket buffers, then waits
			_, err = s.Write(make([]byte, 1<<20))
		}
		assertTimedOut(t, err, time.Since(start), 100*time.Millisecond)
	})
}

func assertTimedOut(t *testing.T, err error, took, notBefore time.Duration) {
	t.Helper()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if took < notBefore || took > 5*time.Second {
		t.Errorf("timed out after %v, want from %v on", took, notBefore)
	}
}

// TestCopiesKeepTheDeadlines: io.Copy to and from the connection goes
// through its Read and Write (the TCPConn's ReadFrom and WriteTo would
// go around its deadlines).
func TestCopiesKeepTheDeadlines(t *testing.T) {
	c, s := pair(t)
	want := make([]byte, 3<<20)
	for i := range want {
		want[i] = byte(i * 13)
	}
	s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	s.SetReadDeadline(time.Now().Add(time.Minute)) // woken early, mid-copy
	errc := make(chan error, 1)
	go func() {
		time.Sleep(40 * time.Millisecond)
		_, err := io.Copy(c, struct{ io.Reader }{bytes.NewReader(want)}) // c.ReadFrom
		c.(*Conn).CloseWrite()
		errc <- err
	}()
	var got bytes.Buffer
	if _, err := io.Copy(&got, s); err != nil { // s.WriteTo
		t.Fatalf("copy from the connection: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("copy to the connection: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("the bytes copied differ")
	}
}

// TestPaceWrites: after PaceWrites the write deadline set next bounds each
// write: writes that the peer keeps reading go on past the deadline's
// span for as long as they come, and a write the peer leaves waiting
// fails a span after it began. The deadline set after that one bounds all
// writes again.
func TestPaceWrites(t *testing.T) {
	const span = 60 * time.Millisecond
	c, s := pair(t)
	go io.Copy(io.Discard, c) // a client that keeps reading
	s.(*Conn).PaceWrites()
	s.SetWriteDeadline(time.Now().Add(span))
	start := time.Now()
	for time.Since(start) < 4*span {
		if _, err := s.Write([]byte("data: event\n\n")); err != nil {
			t.Fatalf("a write %v into a stream its client reads: %v", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(span / 6)
	}
	// The next deadline set bounds all writes again.
	s.SetWriteDeadline(time.Now().Add(span))
	time.Sleep(span + span/4)
	if _, err := s.Write([]byte("late")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write past an unpaced deadline: %v, want a timeout", err)
	}

	// A client that stops reading: the write that waits fails a span
	// after it began.
	_, s2 := pair(t)
	s2.(*Conn).PaceWrites()
	s2.SetWriteDeadline(time.Now().Add(span))
	time.Sleep(2 * span) // past the span: a paced write starts afresh
	chunk := make([]byte, 1<<20)
	var err error
	var began time.Time
	for range 1 << 10 { // until the socket buffers are full and a write waits
		began = time.Now()
		if _, err = s2.Write(chunk); err != nil {
			break
		}
	}
	assertTimedOut(t, err, time.Since(began), span)
}

// TestExactDialer: its connections keep both deadlines exactly, Dialer's
// with their slack.
func TestExactDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }
	for _, tt := range []struct {
		name  string
		dial  func(string) (net.Conn, error)
		exact bool
	}{{"Dialer", Dialer(dial), false}, {"ExactDialer", ExactDialer(dial), true}} {
		c, err := tt.dial(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		w := c.(*Conn)
		if w.rdl.exact != tt.exact || w.wdl.exact != tt.exact {
			t.Errorf("%s: exact read %v, write %v; want %v", tt.name, w.rdl.exact, w.wdl.exact, tt.exact)
		}
		c.Close()
	}
}
