package door

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/ratebatch/ratebatch/dispatcher"
)

// Forwarding picks out of a batched call's headers (its gRPC metadata)
// those that decide who may call: Authorization, the names the operator
// lists (forward_headers, the KEY of Triton's restricted APIs) and those
// matching Triton's header-forward pattern. Straight to Triton they would
// have been read with the request (refused without the key, passed to
// the backend as parameters); a merged batch must carry them too, and
// callers with different values must not share a batch: the door puts
// them in the call (dispatcher.Call.Forward), which keys the call by
// them and sends them upstream with its batch. Both doors extract with
// the one Forwarding, each reading its own protocol's headers (Headers).
type Forwarding struct {
	names   []string       // lower case; "authorization" first
	pattern *regexp.Regexp // nil: none
}

// NewForwarding returns the forwarding of Authorization, names and the
// headers whose names match pattern ("": none; matched without regard to
// case, anywhere in the name, as Triton's pattern is searched).
func NewForwarding(names []string, pattern string) (*Forwarding, error) {
	f := &Forwarding{names: []string{"authorization"}}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" || contains(f.names, n) {
			continue
		}
		if err := ForwardableName(n); err != nil {
			return nil, err
		}
		f.names = append(f.names, n)
	}
	if pattern != "" {
		re, err := regexp.Compile("(?i)" + pattern)
		if err != nil {
			return nil, fmt.Errorf("header pattern %q: %w", pattern, err)
		}
		f.pattern = re
	}
	return f, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// notForwarded are the names a batch's upstream request writes itself, or
// that belong to one connection or one caller: never forwarded, whatever
// the pattern says. A traceparent is one caller's (Trace), not a batch's.
var notForwarded = map[string]bool{
	"host": true, "content-type": true, "content-length": true, "content-encoding": true,
	"inference-header-content-length": true, "transfer-encoding": true, "connection": true,
	"keep-alive": true, "te": true, "trailer": true, "upgrade": true, "expect": true,
	"proxy-authorization": true, "proxy-connection": true, "accept-encoding": true,
	"user-agent": true, "traceparent": true, "tracestate": true,
}

// ForwardableName reports why a header name (lower case) cannot be
// forwarded on a batch, nil when it can. (That it is an HTTP token, the
// configuration checks.)
func ForwardableName(name string) error {
	if notForwarded[name] || strings.HasPrefix(name, ":") || strings.HasPrefix(name, "grpc-") {
		return fmt.Errorf("header %q is the request's own, not the caller's: it cannot be forwarded", name)
	}
	return nil
}

// Of returns the forwarded headers of a call, in the form
// dispatcher.Call.Forward takes them (dispatcher.AppendHeaderName), ""
// when the call carries none, with no allocation. Each door reads its own
// protocol: get returns the first value of a header by its lower-case
// name (nil when absent: fasthttp's Peek, or the call's gRPC metadata);
// each, needed only with a pattern, calls its argument with every
// header's name and first value.
func (f *Forwarding) Of(get func(name string) []byte, each func(func(name, value []byte))) string {
	if f == nil {
		return ""
	}
	var buf [256]byte
	out := buf[:0]
	for _, name := range f.names {
		v := get(name)
		if v == nil {
			continue
		}
		out = dispatcher.EndHeader(append(dispatcher.AppendHeaderName(out, name), v...))
	}
	if f.pattern != nil {
		return f.matching(out, each)
	}
	if len(out) == 0 {
		return ""
	}
	return string(out)
}

// matching appends to named (Of's headers by name, copied: the closure
// below would move Of's buffer to the heap for every call) the headers
// whose names match the pattern.
func (f *Forwarding) matching(named []byte, each func(func(name, value []byte))) string {
	out := append([]byte(nil), named...)
	each(func(name, value []byte) {
		n := strings.ToLower(string(name))
		if contains(f.names, n) || ForwardableName(n) != nil || !f.pattern.MatchString(n) {
			return
		}
		out = dispatcher.EndHeader(append(dispatcher.AppendHeaderName(out, n), value...))
	})
	return string(out)
}
