package kserve

import (
	"errors"
	"net/http"
	"strconv"
)

// AppendErrorBody appends the KServe v2 error body {"error":"msg"}.
func AppendErrorBody(dst []byte, msg string) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendJSONString(dst, []byte(msg))
	return append(dst, '}')
}

// WriteError answers with a KServe v2 error body and the given status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	body := AppendErrorBody(make([]byte, 0, len(msg)+16), msg)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Del(HeaderContentLength)
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client went away; nothing left to tell it
}

// WriteErr answers with err: its own status when it is an *Error, else 500.
func WriteErr(w http.ResponseWriter, err error) {
	WriteError(w, ErrorStatus(err), err.Error())
}

// ErrorStatus is the HTTP status for err: the Status of an *Error in its
// chain, else 500.
func ErrorStatus(err error) int {
	var e *Error
	if errors.As(err, &e) && e.Status != 0 {
		return e.Status
	}
	return http.StatusInternalServerError
}

// ErrorContentType is the Content-Type of the HTTP answer to err: the
// ContentType of an *Error in its chain, else ContentTypeText, Triton's
// type for an error that is not the request's.
func ErrorContentType(err error) string {
	var e *Error
	if errors.As(err, &e) && e.ContentType != "" {
		return e.ContentType
	}
	return ContentTypeText
}

// ParseErrorBody extracts the message of a KServe v2 error body such as an
// upstream Triton sends; ok is false when body is not one.
func ParseErrorBody(body []byte) (msg string, ok bool) {
	s := scanner{buf: body}
	if s.openObject() != nil {
		return "", false
	}
	first := true
	for {
		key, more, err := s.nextMember(&first)
		if err != nil {
			return "", false
		}
		if !more {
			break
		}
		if string(key) == "error" && s.peek() == '"' {
			b, err := s.str()
			if err != nil {
				return "", false
			}
			msg, ok = string(b), true
			continue
		}
		if _, err := s.skip(); err != nil {
			return "", false
		}
	}
	if s.end() != nil {
		return "", false
	}
	return msg, ok
}
