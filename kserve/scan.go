package kserve

import (
	"bytes"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of JSON objects and arrays, so that hostile
// bodies cannot exhaust the stack; real requests nest a handful of levels
// (tensor data one level per dimension).
const maxDepth = 64

// The bounds of one request, the same at both doors (the HTTP codecs
// here, the gRPC door's through kserve/grpcwire): a request past one is
// refused with 400 (INVALID_ARGUMENT) before it is decoded further.
const (
	// MaxDims bounds the rank of a shape. No model comes near it.
	MaxDims = 32
	// MaxTensors bounds the inputs, outputs or requested outputs of one
	// request. Each tensor costs a few hundred bytes of bookkeeping
	// whatever its size, so without a bound a request of many tiny
	// tensors costs many times its size.
	MaxTensors = 1024
	// MaxParameters bounds the members of one parameters object (the
	// request's, or one tensor's), for the same reason: each is a map
	// entry and a value.
	MaxParameters = 1024
)

// scanner is a hand-written JSON tokenizer over one buffer. It hands out
// slices of the buffer instead of building values, so decoding a request
// allocates per tensor, never per element.
type scanner struct {
	buf   []byte
	pos   int
	depth int
	// dims holds the dimensions shape has read: the shapes of a
	// message's tensors share one allocation, each a capped slice of it.
	dims []int64
}

// syntaxError is a JSON syntax problem at a byte offset of the header.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.off, e.msg)
}

func (s *scanner) errorf(format string, args ...any) error {
	return &syntaxError{off: s.pos, msg: fmt.Sprintf(format, args...)}
}

func (s *scanner) ws() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.pos >= len(s.buf) {
		return 0
	}
	return s.buf[s.pos]
}

func (s *scanner) describeNext() string {
	if s.pos >= len(s.buf) {
		return "end of input"
	}
	return fmt.Sprintf("%q", s.buf[s.pos])
}

func (s *scanner) push() error {
	s.depth++
	if s.depth > maxDepth {
		return s.errorf("nesting deeper than %d levels", maxDepth)
	}
	return nil
}

// openObject consumes '{'.
func (s *scanner) openObject() error {
	if s.peek() != '{' {
		return s.errorf("expected an object, found %s", s.describeNext())
	}
	s.pos++
	return s.push()
}

// nextMember advances to the next member of the current object and returns
// its key (escapes decoded), or ok=false after consuming the closing '}'.
// first must start true for each object.
func (s *scanner) nextMember(first *bool) (key []byte, ok bool, err error) {
	c := s.peek()
	if c == '}' {
		s.pos++
		s.depth--
		return nil, false, nil
	}
	if !*first {
		if c != ',' {
			return nil, false, s.errorf("expected ',' or '}' in object, found %s", s.describeNext())
		}
		s.pos++
		c = s.peek()
	}
	*first = false
	if c != '"' {
		return nil, false, s.errorf("expected a member name, found %s", s.describeNext())
	}
	key, err = s.str()
	if err != nil {
		return nil, false, err
	}
	if s.peek() != ':' {
		return nil, false, s.errorf("expected ':' after member name, found %s", s.describeNext())
	}
	s.pos++
	return key, true, nil
}

// openArray consumes '['.
func (s *scanner) openArray() error {
	if s.peek() != '[' {
		return s.errorf("expected an array, found %s", s.describeNext())
	}
	s.pos++
	return s.push()
}

// nextElement advances to the next element of the current array, or returns
// false after consuming the closing ']'.
func (s *scanner) nextElement(first *bool) (bool, error) {
	c := s.peek()
	if c == ']' {
		s.pos++
		s.depth--
		return false, nil
	}
	if !*first {
		if c != ',' {
			return false, s.errorf("expected ',' or ']' in array, found %s", s.describeNext())
		}
		s.pos++
		if s.peek() == ']' {
			return false, s.errorf("trailing ',' in array")
		}
	}
	*first = false
	return true, nil
}

// str reads a string. Without escapes it returns a slice of the buffer;
// with escapes it returns a freshly decoded copy.
func (s *scanner) str() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.errorf("expected a string, found %s", s.describeNext())
	}
	start := s.pos + 1
	i := start
	for i < len(s.buf) {
		c := s.buf[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return s.buf[start:i], nil
		case c == '\\':
			out := make([]byte, 0, i-start+16)
			out = append(out, s.buf[start:i]...)
			s.pos = i
			return s.appendStringTail(out)
		case c < 0x20:
			s.pos = i
			return nil, s.errorf("control character %#02x in string", c)
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(s.buf[i:])
			if r == utf8.RuneError && n == 1 {
				s.pos = i
				return nil, s.errorf("invalid UTF-8 in string")
			}
			i += n
		}
	}
	s.pos = len(s.buf)
	return nil, s.errorf("unterminated string")
}

// appendString appends the decoded contents of the string at the cursor.
func (s *scanner) appendString(dst []byte) ([]byte, error) {
	if s.peek() != '"' {
		return dst, s.errorf("expected a string, found %s", s.describeNext())
	}
	s.pos++
	return s.appendStringTail(dst)
}

// appendStringTail decodes from the cursor (inside a string) up to and
// including the closing quote.
//
// It stays one function: the scanner's tightest loop, a state machine over
// escapes and UTF-8 whose states share the cursor.
func (s *scanner) appendStringTail(dst []byte) ([]byte, error) {
	i := s.pos
	for {
		// Copy the run of plain bytes in one go.
		j := i
		for j < len(s.buf) {
			c := s.buf[j]
			if c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
				break
			}
			j++
		}
		dst = append(dst, s.buf[i:j]...)
		i = j
		if i >= len(s.buf) {
			s.pos = i
			return dst, s.errorf("unterminated string")
		}
		c := s.buf[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return dst, nil
		case c < 0x20:
			s.pos = i
			return dst, s.errorf("control character %#02x in string", c)
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(s.buf[i:])
			if r == utf8.RuneError && n == 1 {
				s.pos = i
				return dst, s.errorf("invalid UTF-8 in string")
			}
			dst = append(dst, s.buf[i:i+n]...)
			i += n
		default: // backslash
			if i+1 >= len(s.buf) {
				s.pos = i
				return dst, s.errorf("unterminated string")
			}
			switch e := s.buf[i+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
				i += 2
			case 'b':
				dst = append(dst, '\b')
				i += 2
			case 'f':
				dst = append(dst, '\f')
				i += 2
			case 'n':
				dst = append(dst, '\n')
				i += 2
			case 'r':
				dst = append(dst, '\r')
				i += 2
			case 't':
				dst = append(dst, '\t')
				i += 2
			case 'u':
				r, ok := hex4(s.buf, i+2)
				if !ok {
					s.pos = i
					return dst, s.errorf(`invalid \u escape`)
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+1 < len(s.buf) && s.buf[i] == '\\' && s.buf[i+1] == 'u' {
						r2, ok = hex4(s.buf, i+2)
					}
					dec := utf16.DecodeRune(r, r2)
					if !ok || dec == utf8.RuneError {
						s.pos = i - 6
						return dst, s.errorf(`unpaired UTF-16 surrogate in \u escape`)
					}
					r = dec
					i += 6
				}
				dst = utf8.AppendRune(dst, r)
			default:
				s.pos = i
				return dst, s.errorf("invalid escape '\\%c'", e)
			}
		}
	}
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number reads a JSON number and returns its text; isInt is true when it has
// neither fraction nor exponent.
func (s *scanner) number() (text []byte, isInt bool, err error) {
	s.ws()
	start, i := s.pos, s.pos
	b := s.buf
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return nil, false, s.errorf("expected a number, found %s", s.describeNext())
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		isInt = false
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			s.pos = i
			return nil, false, s.errorf("expected a digit after '.'")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		isInt = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			s.pos = i
			return nil, false, s.errorf("expected a digit in exponent")
		}
	}
	s.pos = i
	return b[start:i], isInt, nil
}

// literal consumes the word w (true, false, null, NaN, ...) if it is next.
func (s *scanner) literal(w string) bool {
	s.ws()
	if len(s.buf)-s.pos >= len(w) && string(s.buf[s.pos:s.pos+len(w)]) == w {
		s.pos += len(w)
		return true
	}
	return false
}

// boolean reads true or false.
func (s *scanner) boolean() (bool, error) {
	switch {
	case s.literal("true"):
		return true, nil
	case s.literal("false"):
		return false, nil
	}
	return false, s.errorf("expected true or false, found %s", s.describeNext())
}

// skipBrackets moves past the array at the cursor by matching its brackets
// alone, with vectorised searches instead of a look at every byte, and
// reports whether it could: not when the array is not closed, nests deeper
// than maxDepth, or holds a string or an object, whose contents may hold
// brackets. What it moves past is not checked otherwise: the caller decodes
// it later (jsonText) or leaves that to Triton.
func (s *scanner) skipBrackets() bool {
	b := s.buf[s.pos:]
	open, end := 0, 0
	for {
		j := bytes.IndexByte(b[end:], ']')
		if j < 0 {
			return false
		}
		// Every '[' before this ']' opens a level first: the deepest point
		// of the stretch is open plus their count.
		n := bytes.Count(b[end:end+j], openBracket)
		if s.depth+open+n > maxDepth {
			return false
		}
		open += n - 1
		end += j + 1
		if open == 0 {
			break
		}
	}
	if bytes.IndexByte(b[:end], '"') >= 0 || bytes.IndexByte(b[:end], '{') >= 0 {
		return false
	}
	s.pos += end
	return true
}

var openBracket = []byte{'['}

// skip consumes one value of any kind, checking its syntax, and returns its text.
func (s *scanner) skip() ([]byte, error) {
	c := s.peek()
	start := s.pos
	var err error
	switch c {
	case '{':
		if err = s.openObject(); err != nil {
			return nil, err
		}
		first := true
		for {
			_, ok, err := s.nextMember(&first)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if _, err := s.skip(); err != nil {
				return nil, err
			}
		}
	case '[':
		if err = s.openArray(); err != nil {
			return nil, err
		}
		first := true
		for {
			ok, err := s.nextElement(&first)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if _, err := s.skip(); err != nil {
				return nil, err
			}
		}
	case '"':
		_, err = s.str()
	case 't', 'f':
		_, err = s.boolean()
	case 'n':
		if !s.literal("null") {
			err = s.errorf("expected a value, found %s", s.describeNext())
		}
	case 'N', 'I', '-':
		// Non-finite float tokens (see jsondata.go), else a negative number.
		if !s.literal("NaN") && !s.literal("Infinity") && !s.literal("-Infinity") {
			_, _, err = s.number()
		}
	default:
		_, _, err = s.number()
	}
	if err != nil {
		return nil, err
	}
	return s.buf[start:s.pos], nil
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end() error {
	if s.peek() != 0 || s.pos < len(s.buf) {
		return s.errorf("unexpected %s after the JSON object", s.describeNext())
	}
	return nil
}

// parseUint parses the digits of a JSON integer (sign excluded) into a
// uint64, reporting overflow.
func parseUint(digits []byte) (uint64, bool) {
	if len(digits) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range digits {
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
