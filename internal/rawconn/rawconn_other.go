//go:build !linux

package rawconn

import "net"

// Wrap returns c: raw reads and writes are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }

// Exact returns c: its deadlines are the runtime's own, exact.
func Exact(c net.Conn) net.Conn { return c }

// Unread reports false: the check is made on Linux only.
func Unread(net.Conn) bool { return false }
