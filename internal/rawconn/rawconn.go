// Package rawconn makes TCP connections whose reads and writes skip the Go
// runtime's system-call bookkeeping.
//
// A socket the runtime's network poller owns is non-blocking: a read or a
// write either moves bytes at once or fails with EAGAIN, after which the
// poller parks the goroutine until the socket is ready. Such a call never
// blocks, yet net.Conn makes it through syscall.Syscall, whose
// entersyscall/exitsyscall exist to hand the P to another thread when a call
// blocks. On the way in, entersyscall also wakes the runtime's monitor
// thread (sysmon) whenever the process had gone idle, and sysmon then polls
// every 20 µs for a while before it goes back to sleep. At the rates a proxy
// usually sees, where the process idles between requests, that was the
// largest single cost of the pass-through proxy after the kernel's TCP
// work (docs/ARCHITECTURE.md, "Principles"). Reads and writes made with
// syscall.RawSyscall inside
// syscall.RawConn's Read and Write keep the poller's readiness waits and
// deadlines and drop that bookkeeping.
//
// Deadlines are kept by the connection, and the runtime's timer only wakes
// it: fasthttp sets them afresh at every request, and passing each on
// re-armed the poller's timers five times per exchange. An operation fails
// from its deadline on, and at most an eighth of the deadline's span late;
// on a connection made exact (Exact, ExactDialer), at its deadline.
//
// Only connections known to be TCP on Linux are wrapped; anything else is
// returned as it is.
package rawconn

import "net"

// Listener wraps a listener so that the TCP connections it accepts are
// wrapped with Wrap.
type Listener struct{ net.Listener }

// Accept waits for the next connection and wraps it.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Dialer returns dial with every TCP connection it makes wrapped.
func Dialer(dial func(addr string) (net.Conn, error)) func(addr string) (net.Conn, error) {
	return dialer(dial, Wrap)
}

// ExactDialer is Dialer, each connection's deadlines kept exactly
// (Exact): for a client whose deadlines are its callers', who must be
// answered by them, where a server's timeouts only bound the waste of a
// stuck peer and may fire a little late.
func ExactDialer(dial func(addr string) (net.Conn, error)) func(addr string) (net.Conn, error) {
	return dialer(dial, func(c net.Conn) net.Conn { return Exact(Wrap(c)) })
}

func dialer(dial func(addr string) (net.Conn, error), wrap func(net.Conn) net.Conn) func(addr string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		c, err := dial(addr)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	}
}
