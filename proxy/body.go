package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
)

// bodyLease is a large body's buffer: the pooled one its reservation
// leased or readBody claimed (buf, nil when the budget had none idle;
// class, its size class), and the one it was read into, to keep in the
// pool once the request is answered (keep).
type bodyLease struct {
	buf   []byte
	class int64
	keep  []byte
}

// Body buffers are reused: once Submit has returned nothing refers to a
// request's bytes (the upstream call that streamed them has ended), so the
// next request reads into the same memory instead of new, zeroed memory.
// Small bodies' buffers are kept here; large ones (past
// membudget.MinClass, with a budget) in the budget's pool of size
// classes, counted in it (bodyLease).
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// poolBodyMax is the largest buffer kept for reuse (an image batch's
// request is 600 KB); larger ones go to the collector.
const poolBodyMax = 4 << 20

func putBodyBuffer(bp *[]byte) {
	if cap(*bp) <= poolBodyMax {
		*bp = (*bp)[:0]
		bodyBuffers.Put(bp)
	}
}

// readBody reads the whole body within the size limit into the
// admission's buffer (its lease's, for a large body), holding its bytes as
// they come, and decodes a Content-Encoding of gzip or deflate. raw is the
// body as sent, body the decoded one (the same slice when not encoded).
// It stays one function: the size limit, the bytes held against the
// memory budget and the buffer they go to are one accounting, audited in
// one place.
func (s *Server) readBody(ctx *fasthttp.RequestCtx, a *admission) (raw, body []byte, err error) {
	bp, lease, hold := a.bp, &a.lease, &a.Hold
	limit := s.o.MaxBodyBytes
	// -1 chunked, -2 none; never over the limit (headerReceived).
	declared := int64(ctx.Request.Header.ContentLength())
	if stream := ctx.RequestBodyStream(); stream != nil {
		// Reserve the declared length only up to reserveMax: a client that
		// declares 64 MiB and sends nothing must not hold 64 MiB.
		var buf []byte
		// With the declared length held by the memory budget, a body whose
		// first reserveMax bytes came grows to it at once (whole): a 60 MB
		// body would otherwise hold its last two buffers, 32 and 60 MB, at
		// once while it is copied from one to the other. A leased body
		// grows to its size class, so that its buffer can be pooled, or
		// reads into the pooled buffer its lease came with.
		var whole int64
		if lease.buf == nil && lease.class > 0 {
			lease.buf = hold.B.Claim(lease.class) // given back since the headers
		}
		switch {
		case lease.buf != nil:
			buf = lease.buf[:0]
		case lease.class > 0:
			whole = lease.class
		case hold.B != nil && declared > 0 && hold.Held() > declared:
			whole = declared + 1
		}
		if buf == nil {
			*bp = slices.Grow((*bp)[:0], int(min(max(declared, 512), reserveMax)+1))
			buf = *bp
		}
		raw, err = readAll(stream, limit+1, buf, declared, whole, func(c int) bool { return hold.Grow(int64(c)) })
		if lease.class > 0 && int64(cap(raw)) == lease.class {
			lease.keep = raw[:0]
		} else {
			*bp = raw[:0]
		}
		if errors.Is(err, errOverBudget) {
			return nil, nil, err
		}
		if err != nil {
			return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "reading request body: " + err.Error()}
		}
		if int64(len(raw)) > limit {
			s.door.Refused("body_too_large")
			return nil, nil, tooLarge(limit)
		}
	} else {
		raw = ctx.Request.Body() // already in memory (tests, small bodies)
	}
	if declared >= 0 && int64(len(raw)) != declared {
		return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("request body has %d bytes, Content-Length says %d", len(raw), declared)}
	}
	var dec io.ReadCloser
	switch enc := strings.ToLower(strings.TrimSpace(string(ctx.Request.Header.ContentEncoding()))); enc {
	case "", "identity":
		return raw, raw, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "gzip body: " + err.Error()}
		}
		dec = zr
	case "deflate": // HTTP's deflate is the zlib format (RFC 9110), as Triton reads it
		zr, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "deflate (zlib) body: " + err.Error()}
		}
		dec = zr
	default:
		return nil, nil, &kserve.Error{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("unsupported Content-Encoding %q (gzip, deflate)", enc)}
	}
	defer dec.Close()
	// The decoded size is bounded too: a small bomb must not cost memory.
	rawHeld := hold.Held()
	charge := func(c int) bool { return hold.Grow(rawHeld + int64(c)) }
	if !charge(int(min(4*int64(len(raw)), limit+1))) {
		return nil, nil, errOverBudget
	}
	body, err = readAll(dec, limit+1, make([]byte, 0, min(4*int64(len(raw)), limit+1)), -1, 0, charge)
	switch {
	case errors.Is(err, errOverBudget):
		return nil, nil, err
	case err != nil:
		return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "decompressing body: " + err.Error()}
	case int64(len(body)) > limit:
		s.door.Refused("body_too_large")
		return nil, nil, tooLarge(limit)
	}
	return raw, body, nil
}

func tooLarge(limit int64) error {
	return &kserve.Error{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body exceeds %d bytes", limit)}
}

// reserveMax is the most memory a request body gets before its bytes
// arrive; beyond it the buffer grows with what is actually received.
const reserveMax = 1 << 20

// readAll reads r to its end, or until it holds limit bytes (the caller's
// cue for a body over its limit), into buf. A full buffer doubles, but not past
// declared+1 bytes when the length is known (declared >= 0; the extra byte
// lets the last read see EOF without growing), so memory follows the bytes
// received, at most twice over, and an honest large body is read with a
// few regrowths.
//
// charge is asked, before bytes are read, for the length buf may reach:
// ahead in doubling steps (a pooled buffer may be far larger than the
// body), so that memory held follows the bytes received, at most twice
// over; when it refuses, readAll stops with errOverBudget.
//
// whole, when > declared, grows a buffer that holds reserveMax bytes
// straight to a capacity of whole (declared+1, or a pool's size class).
func readAll(r io.Reader, limit int64, buf []byte, declared int64, whole int64, charge func(length int) bool) ([]byte, error) {
	held := 0 // the length charged for
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			grow := max(cap(buf), 512)
			if declared > int64(len(buf)) {
				grow = int(min(int64(grow), declared+1-int64(len(buf))))
			}
			if whole > declared && declared > int64(len(buf)) && len(buf) >= reserveMax {
				// Exactly whole: append's growth would round it up.
				nb := make([]byte, len(buf), whole)
				copy(nb, buf)
				buf = nb
			} else {
				buf = slices.Grow(buf, grow)
			}
		}
		end := int(min(int64(cap(buf)), limit))
		if len(buf) >= held {
			held = min(end, max(2*len(buf), len(buf)+4096))
			if !charge(held) {
				return buf, errOverBudget
			}
		}
		n, err := r.Read(buf[len(buf):min(end, held)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// errOverBudget ends a body's read when its next bytes would pass the
// memory budget.
var errOverBudget = errors.New("over the memory budget")

// refuseMemory answers 503 with Retry-After to a request whose body would
// pass the memory budget (reason: memory_declared when its Content-Length
// did, memory_growing when a chunked or compressed body grew past it). The
// rest of its body is not read, so its connection is closed.
//
// What is left of the body is read and thrown away first, up to the body
// limit, through one small buffer: no memory is held for it, and the
// client, which may be sending it still, reads the 503 instead of a reset
// (a connection closed with unread bytes is reset, and a reset may discard
// the answer before the client reads it). Past the limit, or on an error,
// the connection closes.
func (s *Server) refuseMemory(ctx *fasthttp.RequestCtx, model, reason string, n int64) {
	s.refuse(ctx, model, door.NoRoom(reason, s.door.Memory.Limit(), n))
}

// refuse answers 503 with Retry-After to a request refused before its
// body was read (r.Reason: the metric's label), its body thrown away first
// as refuseMemory says.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, model string, r *door.Refusal) {
	s.door.Refused(r.Reason)
	if stream := ctx.RequestBodyStream(); stream != nil {
		bp := drainBuffers.Get().(*[]byte)
		left := s.o.MaxBodyBytes + 1
		var err error
		for left > 0 && err == nil {
			var k int
			k, err = stream.Read((*bp)[:min(int64(len(*bp)), left)])
			left -= int64(k)
		}
		drainBuffers.Put(bp)
		if err != io.EOF {
			closeUnread(ctx)
		}
	}
	s.fail(ctx, model, r)
}

var drainBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
