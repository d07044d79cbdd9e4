//go:build linux

package rawconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Conn is a *net.TCPConn whose Read and Write are raw system calls and
// whose deadlines it keeps itself (see deadline). ReadFrom and WriteTo go
// through Write and Read (no sendfile or splice: nothing here sends files);
// every other method (Close, addresses, SyscallConn) is the TCPConn's own.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	rdl, wdl deadline
	// pace, when set, makes the next write deadline a bound on each write
	// (PaceWrites); wspan is then its span, which every write renews.
	pace  atomic.Bool
	wspan atomic.Int64

	// One read and one write at a time, as the poller serialises them
	// anyway; the state lives here so that Read and Write allocate nothing
	// (a closure handed to RawConn would escape on every call).
	rmu    sync.Mutex
	rbuf   []byte
	rn     int
	rerrno syscall.Errno
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

// Exact makes c's deadlines exact if it is a *Conn (see deadline), and
// returns c.
func Exact(c net.Conn) net.Conn {
	if w, ok := c.(*Conn); ok {
		w.rdl.exact, w.wdl.exact = true, true
	}
	return c
}

// Wrap returns c with raw reads and writes if it is a *net.TCPConn, and c
// itself otherwise.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &Conn{TCPConn: tc, rc: rc}
	w.readFn, w.writeFn = w.read, w.write
	return w
}

// SetDeadline sets both deadlines, each as SetReadDeadline does.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline: reads fail from t on, at the
// latest 1/slackShare of its span after t (see deadline).
func (c *Conn) SetReadDeadline(t time.Time) error {
	return c.rdl.set(t, c.TCPConn.SetReadDeadline)
}

// SetWriteDeadline sets the write deadline, as SetReadDeadline does; after
// PaceWrites, t's span bounds each write instead.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	var span time.Duration
	if c.pace.Swap(false) && !t.IsZero() {
		span = max(time.Until(t), 1)
	}
	c.wspan.Store(int64(span))
	return c.wdl.set(t, c.TCPConn.SetWriteDeadline)
}

// PaceWrites makes the next write deadline set bound each write rather
// than all of them: every write renews it for the same span, until a
// deadline is set again. A server sets one deadline for an answer; an
// answer streamed for as long as its client reads it (server-sent
// events) is then never cut, and one whose client stops reading is, a
// span after the write that waits began.
func (c *Conn) PaceWrites() { c.pace.Store(true) }

// slackShare bounds how late a deadline fails an operation: by at most
// 1/slackShare of the span it was set for.
const slackShare = 8

// deadline is one direction's deadline, kept here rather than in the
// runtime's poller. fasthttp sets the deadlines afresh for every request on
// both sides of the proxy: the server's read deadline alternates between
// the idle and the header timeout, the others move a little later each
// time. Passed on, that is five runtime timer updates per pass-through
// exchange, each taking the poller's lock, a visible share of the proxy's
// user time (docs/ARCHITECTURE.md, "Principles").
//
// So the runtime's deadline (armed) only ever wakes the connection: it is
// left alone while it falls no later than the deadline asked for (want)
// plus its slack, and when it fires before want, the read or write it
// fails is retried after re-arming it for want (expired). A deadline
// moved earlier than the slack allows, or already past, is armed at once.
// A connection busy with requests re-arms its timers about once per
// timeout instead of five times per request, and an operation fails
// between want and want plus 1/slackShare of its span, never before.
//
// An exact deadline (Exact) has no slack: the runtime's fires at want,
// and is re-armed whenever want moves later.
type deadline struct {
	mu    sync.Mutex
	want  time.Time // zero: none
	armed time.Time // the runtime's; zero: none
	exact bool
}

// slack is how late the runtime's deadline may fire for one span away.
func (d *deadline) slack(span time.Duration) time.Duration {
	if d.exact || span <= 0 {
		return 0
	}
	return span / slackShare
}

func (d *deadline) set(t time.Time, arm func(time.Time) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want = t
	switch {
	case t.IsZero():
		return nil // an armed deadline wakes an operation early: expired clears it
	case !d.armed.IsZero() && !d.armed.After(t):
		return nil // wakes early (or on time): expired re-arms
	}
	span := time.Until(t)
	if span > 0 && !d.armed.IsZero() && d.armed.Sub(t) <= d.slack(span) {
		return nil // fires within the slack
	}
	return d.arm(t, span, arm)
}

// arm sets the runtime's deadline for want t, span from now: past its
// time, at once; else a slack later, so that the next requests keep it.
func (d *deadline) arm(t time.Time, span time.Duration, arm func(time.Time) error) error {
	at := t.Add(d.slack(span))
	d.armed = at
	return arm(at)
}

// expired is called when an operation failed on the runtime's deadline.
// It reports whether the deadline asked for has passed; if not, the
// runtime's deadline fired early, and it is re-armed (or cleared) for the
// operation to go on.
func (d *deadline) expired(arm func(time.Time) error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.want.IsZero() {
		d.armed = time.Time{}
		return arm(time.Time{}) != nil
	}
	span := time.Until(d.want)
	if span <= 0 {
		return true
	}
	return d.arm(d.want, span, arm) != nil
}

// ReadFrom copies r to the connection through Write, so that the copy keeps
// Write's deadline (the TCPConn's own would go around it).
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{c}, r)
}

// WriteTo copies the connection to w through Read, as ReadFrom does.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, readerOnly{c})
}

type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }

func (c *Conn) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until the poller says readable
		}
		c.rn, c.rerrno = int(n), e
		return true
	}
}

// Read reads like net.Conn's Read: io.EOF at the end of the stream, a
// *net.OpError otherwise.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.rbuf, c.rn, c.rerrno = p, 0, 0
	err := c.rc.Read(c.readFn)
	for err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !c.rdl.expired(c.TCPConn.SetReadDeadline) {
		err = c.rc.Read(c.readFn)
	}
	n, errno := c.rn, c.rerrno
	c.rbuf = nil
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) write(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.wbuf[c.wn])), uintptr(len(c.wbuf)-c.wn))
		switch e {
		case 0:
			c.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until the poller says writable
		default:
			c.werrno = e
			return true
		}
	}
	return true
}

// Write writes all of p unless an error stops it, like net.Conn's Write.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	if span := time.Duration(c.wspan.Load()); span > 0 {
		if err := c.wdl.set(time.Now().Add(span), c.TCPConn.SetWriteDeadline); err != nil {
			c.wmu.Unlock()
			return 0, c.opError("write", err)
		}
	}
	c.wbuf, c.wn, c.werrno = p, 0, 0
	err := c.rc.Write(c.writeFn)
	for err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !c.wdl.expired(c.TCPConn.SetWriteDeadline) {
		err = c.rc.Write(c.writeFn)
	}
	n, errno := c.wn, c.werrno
	c.wbuf = nil
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError reports err as net.Conn's Read and Write do. RawConn's own
// errors (a deadline, a closed connection) already come as a *net.OpError
// naming "raw-read" or "raw-write": its cause is kept, the wrapping is ours.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Unread reports whether bytes wait unread on c's socket, without reading
// them and without blocking (recv with MSG_PEEK and MSG_DONTWAIT); false
// when c is not a socket. An HTTP client asks before it sends a request on
// a kept-alive connection: bytes there came after the last answer ended,
// and would be read as the next request's answer.
func Unread(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var (
		buf [1]byte
		n   uintptr
		e   syscall.Errno
	)
	// Control, not Read: no deadline of the last exchange applies, and
	// the poller is not asked to wait.
	if rc.Control(func(fd uintptr) {
		n, _, e = syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	}) != nil {
		return false
	}
	return e == 0 && n > 0
}
