package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The proxy's own calls to Triton's management API and metrics carry
// upstream_headers, and leave the request they were given as it was.
func TestOwnCallsCarryUpstreamHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	defer srv.Close()
	c := httpClient(nil, time.Second, map[string]string{"Api-Key": "k"})
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v2/repository/index", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-got; h.Get("Api-Key") != "k" {
		t.Fatalf("the upstream saw %v, want Api-Key", h)
	}
	if req.Header.Get("Api-Key") != "" {
		t.Fatal("the caller's request was changed")
	}
}
