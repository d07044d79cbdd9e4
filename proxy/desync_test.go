package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/proxy"
)

// An upstream that answers a pass-through call twice: the second copy
// must not become the next client's answer. The kept-alive connection
// holding it is closed before the next call is sent, which goes on
// another and gets its own answer.
func TestPassthroughUpstreamAnsweringTwice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var calls atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					n := calls.Add(1)
					answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nanswer-%d", n)
					io.WriteString(c, answer)
					if n == 1 {
						time.Sleep(20 * time.Millisecond) // after the proxy has read the first
						io.WriteString(c, answer)
					}
				}
			}()
		}
	}()
	front := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}}, Upstream: mustURL("http://" + ln.Addr().String()), MaxBodyBytes: 1 << 20})
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 1; i <= 2; i++ {
		resp, err := client.Get(front + "/v2/models/simple")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprint("answer-", i); string(body) != want {
			t.Errorf("call %d got %q, want %q: another call's answer", i, body, want)
		}
		time.Sleep(50 * time.Millisecond) // the second copy is in
	}
}
