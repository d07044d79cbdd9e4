//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

func canPeek(conn net.Conn) bool {
	_, ok := conn.(syscall.Conn)
	return ok
}

// peerClosed reports whether the peer has closed or reset the connection,
// without consuming anything it sent (a pipelined request stays queued).
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET)
		return true
	})
	return closed
}
