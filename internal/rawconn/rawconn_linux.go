//go:build linux

package rawconn

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Conn is a *net.TCPConn whose Read and Write are raw system calls and
// whose deadlines are coalesced (see deadline). Every other method (Close,
// addresses, SyscallConn, ReadFrom for sendfile) is the TCPConn's own.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	rdl, wdl deadline

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

// SetReadDeadline sets the read deadline; it may fire late by up to
// 1/slackShare of its span (see deadline).
func (c *Conn) SetReadDeadline(t time.Time) error {
	return c.rdl.set(t, c.TCPConn.SetReadDeadline)
}

// SetWriteDeadline sets the write deadline; it may fire late by up to
// 1/slackShare of its span (see deadline).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.wdl.set(t, c.TCPConn.SetWriteDeadline)
}

// slackShare bounds how late a coalesced deadline fires: by at most
// 1/slackShare of the span it was set for.
const slackShare = 8

// deadline coalesces one direction's deadline. fasthttp sets the read and
// write deadlines afresh for every request on both sides of the proxy, a
// little later each time (now plus the timeout): five runtime timer
// updates per pass-through exchange, each taking the poller's lock, which
// was 7% of the proxy's user time (docs/BENCHMARKS.md, "Issue 19:
// coalesced deadlines"). A deadline is therefore armed a little past the
// time asked for, by 1/slackShare of its span, and a later request for a
// time at most that much before the armed one keeps it: a timeout of 30 s
// fires between 30 and 33.75 s, and the timer is re-armed about once per
// 3.75 s of traffic instead of at every request. A deadline moved earlier
// than the armed one, or cleared, or already past, is applied at once.
type deadline struct {
	mu    sync.Mutex
	armed time.Time // zero: none
}

func (d *deadline) set(t time.Time, arm func(time.Time) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.IsZero() {
		if d.armed.IsZero() {
			return nil
		}
		d.armed = time.Time{}
		return arm(t)
	}
	span := time.Until(t)
	if span <= 0 {
		d.armed = t
		return arm(t)
	}
	if !d.armed.IsZero() && !d.armed.Before(t) && d.armed.Sub(t) <= span/slackShare {
		return nil
	}
	late := t.Add(span / slackShare)
	if err := arm(late); err != nil {
		return err
	}
	d.armed = late
	return nil
}

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
	c.wbuf, c.wn, c.werrno = p, 0, 0
	err := c.rc.Write(c.writeFn)
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
