package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/kserve"
)

// A client that sends the whole of a body declared over the limit, as
// net/http, tritonclient and curl (below its Expect threshold) do, must
// read the 413, not a broken pipe: the proxy answers before it has read
// the body, and a socket closed with bytes unread resets the connection,
// which can destroy the answer in flight. The sizes span a body that fits
// the socket buffers and ones that cannot.
func TestDeclaredTooLargeIsAnsweredNotReset(t *testing.T) {
	base := newFuzzServer(t, echoBatcher{})
	for _, size := range []int{fuzzBodyLimit + 1, 256 << 10, 4 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			body := bytes.Repeat([]byte(" "), size)
			for i := range 20 {
				resp, err := http.Post(base+"/v2/models/simple/infer", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatalf("post %d: %v", i, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if msg, ok := kserve.ParseErrorBody(b); resp.StatusCode != http.StatusRequestEntityTooLarge || !ok || !strings.Contains(msg, "exceeds") {
					t.Fatalf("post %d: status %d body %q; want 413 with a KServe error", i, resp.StatusCode, b)
				}
			}
		})
	}
}

// The mark headerReceived leaves on a request it refuses by its declared
// length is the proxy's own: a client that sends one is served as if it
// had not.
func TestClientCannotSendTheDeclaredMark(t *testing.T) {
	base := newFuzzServer(t, echoBatcher{})
	body := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,2],"data":[1,2]}]}`
	for _, v := range []string{"L5", "M100", "W7", "x", ""} {
		req, err := http.NewRequest(http.MethodPost, base+"/v2/models/simple/infer", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Ratebatch-Declared", v)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("mark %q sent by the client: status %d body %q; want 200", v, resp.StatusCode, b)
		}
	}
}
