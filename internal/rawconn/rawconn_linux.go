//go:build linux

package rawconn

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Conn is a *net.TCPConn whose Read and Write are raw system calls. Every
// other method (Close, addresses, deadlines, SyscallConn, ReadFrom for
// sendfile) is the TCPConn's own.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

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
