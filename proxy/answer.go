package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
)

// reply writes a batched call's answer, or its error; a client that hung
// up while its call was queued (gone) gets none. The answer is written
// once the handler returns: until then it is held (Answered).
func (s *Server) reply(ctx *fasthttp.RequestCtx, res *dispatcher.Result, gone bool, a *admission) {
	if res.Err != nil {
		if gone {
			ctx.SetConnectionClose() // the client is gone
			return
		}
		s.fail(ctx, a.Model, res.Err)
		return
	}
	var err error
	if res.Wire != nil {
		writeWire(ctx, res.Wire.Body, res.Wire.HeaderLen)
	} else {
		err = writeResponse(ctx, res.Resp)
	}
	a.Answered(res, int64(len(ctx.Response.Body())))
	if err != nil {
		s.log.Debug("writing response", "model", a.Model, "err", err)
	}
}

// fail answers err with its status (door.StatusCode) and a KServe v2
// error body of its Content-Type (kserve.ErrorContentType: Triton's own
// for Triton's answer passed back), as Triton does.
func (s *Server) fail(ctx *fasthttp.RequestCtx, model string, err error) {
	status := door.StatusCode(err)
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(int(s.o.RetryAfter.Round(time.Second)/time.Second), 1)))
	}
	s.door.Failed(model, strconv.Itoa(status))
	writeErrorAs(ctx, status, err.Error(), kserve.ErrorContentType(err))
}

// writeError answers with a KServe v2 error body, text/plain as Triton
// answers an error that is not its request's (kserve.ContentTypeText).
func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	writeErrorAs(ctx, status, msg, kserve.ContentTypeText)
}

// writeErrorAs answers with a KServe v2 error body of the given Content-Type.
func writeErrorAs(ctx *fasthttp.RequestCtx, status int, msg, contentType string) {
	ctx.Response.Header.Del(kserve.HeaderContentLength)
	ctx.Response.Header.Del("Content-Encoding")
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentType)
	ctx.Response.ResetBody()
	ctx.Response.SetBodyRaw(kserve.AppendErrorBody(make([]byte, 0, len(msg)+16), msg))
}

// writeResponse writes a caller's response, compressed when the client
// accepts gzip or deflate, as Triton does.
func writeResponse(ctx *fasthttp.RequestCtx, resp *kserve.Response) error {
	buf := ctx.Response.SwapBody(nil)
	body, headerLen, err := kserve.AppendResponse(buf[:0], resp)
	if err != nil {
		ctx.Response.SwapBody(body)
		writeError(ctx, http.StatusInternalServerError, "encoding response: "+err.Error())
		return err
	}
	setAnswer(ctx, body, headerLen)
	return nil
}

// writeWire answers with an upstream's answer as it came (a lone caller's,
// see dispatcher.Call.Wire): copied into the response, whose buffer
// fasthttp reuses, as the upstream's is given back once written.
func writeWire(ctx *fasthttp.RequestCtx, body []byte, headerLen int) {
	buf := ctx.Response.SwapBody(nil)
	setAnswer(ctx, append(buf[:0], body...), headerLen)
}

// setAnswer makes body, of the given Inference-Header-Content-Length (-1
// when all JSON), the 200 answer, compressed as the client accepts.
func setAnswer(ctx *fasthttp.RequestCtx, body []byte, headerLen int) {
	if enc := acceptedEncoding(string(ctx.Request.Header.Peek("Accept-Encoding"))); enc != "" {
		body = compress(body, enc)
		ctx.Response.Header.Set("Content-Encoding", enc)
	}
	ctx.Response.SwapBody(body)
	if headerLen >= 0 {
		ctx.SetContentType("application/octet-stream")
		// Set would copy and normalise the name afresh at every answer.
		var n [20]byte
		ctx.Response.Header.SetCanonical(headerLengthName, strconv.AppendInt(n[:0], int64(headerLen), 10))
	} else {
		ctx.SetContentType("application/json")
	}
	ctx.SetStatusCode(http.StatusOK)
}

// headerLengthName is kserve.HeaderContentLength in fasthttp's canonical
// spelling, which it already is.
var headerLengthName = []byte(kserve.HeaderContentLength)

// compress replaces body by its gzip or deflate (zlib) form. fasthttp's
// compressors are pooled: a new gzip.Writer per reply allocates far more
// than the answer it compresses (BenchmarkWriteResponseGzip).
func compress(body []byte, enc string) []byte {
	zp := zbufPool.Get().(*[]byte)
	z := *zp
	if enc == "gzip" {
		z = fasthttp.AppendGzipBytesLevel(z[:0], body, fasthttp.CompressDefaultCompression)
	} else {
		z = fasthttp.AppendDeflateBytesLevel(z[:0], body, fasthttp.CompressDefaultCompression)
	}
	body = append(body[:0], z...)
	*zp = z
	zbufPool.Put(zp)
	return body
}

var zbufPool = sync.Pool{New: func() any { return new([]byte) }}

// acceptedEncoding picks gzip or deflate if the client accepts one: the
// one with the higher quality (RFC 9110 12.5.3), the first listed on a tie.
// A quality of 0 means "not acceptable"; so does one that is not a number.
func acceptedEncoding(h string) string {
	best, bestQ := "", 0.0
	for part := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name != "gzip" && name != "deflate" {
			continue
		}
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(p, "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f < 0 || f > 1 {
				f = 0
			}
			q = f
		}
		if q > bestQ {
			best, bestQ = name, q
		}
	}
	return best
}
