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
	names []string // lower case; "authorization" first
	// grpc are the names' keys in a gRPC call's metadata: the name, or
	// for a restricted API's key Triton's gRPC form of it.
	grpc    []string
	pattern *regexp.Regexp // nil: none
}

// GRPCRestrictedPrefix is what Triton's gRPC front end puts before a
// restricted protocol's KEY (--grpc-restricted-protocol): a gRPC client
// sends the key as metadata "triton-grpc-protocol-KEY", an HTTP client as
// the header KEY.
const GRPCRestrictedPrefix = "triton-grpc-protocol-"

// NewForwarding returns the forwarding of Authorization, names, the keys
// of Triton's restricted APIs (restricted: over gRPC read from their
// GRPCRestrictedPrefix form, sent upstream by their HTTP name, as a batch
// goes over HTTP) and the headers whose names match pattern ("": none;
// matched without regard to case, anywhere in the name, as Triton's
// pattern is searched).
func NewForwarding(names, restricted []string, pattern string) (*Forwarding, error) {
	f := &Forwarding{names: []string{"authorization"}, grpc: []string{"authorization"}}
	add := func(n, grpc string) error {
		if err := ForwardableName(n); err != nil {
			return err
		}
		f.names, f.grpc = append(f.names, n), append(f.grpc, grpc)
		return nil
	}
	for _, n := range restricted {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" && !contains(f.names, n) {
			if err := add(n, GRPCRestrictedPrefix+n); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range names {
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" && !contains(f.names, n) {
			if err := add(n, n); err != nil {
				return nil, err
			}
		}
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

// Of returns the forwarded headers of a call that came through a door of
// protocol p, in the form dispatcher.Call.Forward takes them
// (dispatcher.AppendHeaderName), "" when the call carries none, with no
// allocation. Each door reads its own protocol: get returns the first
// value of a header by its lower-case name (nil when absent: fasthttp's
// Peek, or the call's gRPC metadata); each, needed only with a pattern,
// calls its argument with every header's name and first value.
func (f *Forwarding) Of(p Protocol, get func(name string) []byte, each func(func(name, value []byte))) string {
	if f == nil {
		return ""
	}
	keys := f.names
	if p == GRPC {
		keys = f.grpc
	}
	var buf [256]byte
	out := buf[:0]
	for i, name := range f.names {
		v := get(keys[i])
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
