package proxy

import (
	"net"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestWatchHangUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		client    func(net.Conn)
		wantGone  bool
		pipelined string // sent by the client and still unread after the watch
	}{
		{"client closes", func(c net.Conn) { c.Close() }, true, ""},
		{"client resets", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, true, ""},
		{"client pipelines its next request", func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\n")) }, false, "GET / HTTP/1.1\r\n"},
		{"client waits", func(net.Conn) {}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			ctx, stop := watchHangUp(server)
			defer stop()
			tc.client(client)
			select {
			case <-ctx.Done():
				if !tc.wantGone {
					t.Fatal("watch ended for a client that is still there")
				}
			case <-time.After(hangUpPoll + 2*hangUpPollMax):
				if tc.wantGone {
					t.Fatal("hang-up not seen")
				}
			}
			if tc.pipelined != "" {
				buf := make([]byte, 32)
				server.SetReadDeadline(time.Now().Add(time.Second))
				n, err := server.Read(buf)
				if err != nil || string(buf[:n]) != tc.pipelined {
					t.Fatalf("the watch consumed the pipelined request: read %q, %v", buf[:n], err)
				}
			}
		})
	}
}
