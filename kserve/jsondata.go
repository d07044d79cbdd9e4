package kserve

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// JSON tensor data. Decoding scans a (possibly nested) "data" value straight
// into the raw little-endian layout; encoding writes a flat array from it.
//
// FP16 and BF16 travel in JSON as ordinary numbers: decoding rounds the
// value to nearest-even in the target format, encoding writes the shortest
// decimal that reads back to the same value. (Triton itself refuses FP16 and
// BF16 in JSON; the proxy always talks binary upstream, so JSON clients of
// half-precision models work through it.) Non-finite floats are written and
// read as the tokens NaN, Infinity and -Infinity, as Python's json module
// does, since JSON has no numbers for them.

// dataParser accumulates decoded elements.
type dataParser struct {
	dt     Datatype
	want   int64 // elements the shape declares
	got    int64 // elements seen, including any beyond want (counted only)
	out    []byte
	size   int    // bytes per element
	maxPos uint64 // integer types: largest value allowed
	maxNeg uint64 // integer types: largest magnitude allowed below zero
}

func newDataParser(dt Datatype, want int64, capacity int64) dataParser {
	p := dataParser{dt: dt, want: want, out: make([]byte, 0, capacity), size: dt.Size()}
	switch dt {
	case Uint8, Uint16, Uint32, Uint64:
		p.maxPos = 1<<(8*p.size) - 1 // for Uint64 the shift wraps to 0, giving MaxUint64
	case Int8, Int16, Int32, Int64:
		p.maxPos = 1<<(8*p.size-1) - 1
		p.maxNeg = p.maxPos + 1
	}
	return p
}

// tensorData decodes the data value at the cursor (the scanner's buffer ends
// with it) into raw bytes and returns them with the number of elements seen.
// The buffer is sized once from the shape, bounded by what the text could
// hold, so absurd shapes cannot force huge allocations.
func (s *scanner) tensorData(dt Datatype, want int64) ([]byte, int64, error) {
	span := int64(len(s.buf) - s.pos)
	most := min(want, span/2+1) // every element but the last takes >= 2 bytes ("0,")
	var capacity int64
	if size := dt.Size(); size > 0 {
		capacity = most * int64(size)
	} else {
		capacity = most*4 + span
	}
	p := newDataParser(dt, want, capacity)
	if err := s.dataValue(&p); err != nil {
		return nil, 0, err
	}
	return p.out, p.got, nil
}

func (s *scanner) dataValue(p *dataParser) error {
	if s.peek() == '[' {
		if err := s.openArray(); err != nil {
			return err
		}
		first := true
		for {
			ok, err := s.nextElement(&first)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			if err := s.dataValue(p); err != nil {
				return err
			}
		}
	}
	idx := p.got
	p.got++
	if p.got > p.want { // too many: keep counting for the error message
		_, err := s.skip()
		return err
	}
	if err := s.element(p); err != nil {
		return fmt.Errorf("data element %d: %w", idx, err)
	}
	return nil
}

// element decodes one scalar into p.out.
func (s *scanner) element(p *dataParser) error {
	switch p.dt {
	case Bool:
		v, err := s.boolean()
		if err != nil {
			return err
		}
		p.out = append(p.out, byte(btoi(v)))
		return nil
	case Bytes:
		at := len(p.out)
		p.out = append(p.out, 0, 0, 0, 0)
		var err error
		if p.out, err = s.appendString(p.out); err != nil {
			return err
		}
		n := len(p.out) - at - 4
		if uint64(n) > math.MaxUint32 {
			return fmt.Errorf("string of %d bytes exceeds the 4 GiB BYTES element limit", n)
		}
		binary.LittleEndian.PutUint32(p.out[at:], uint32(n))
		return nil
	case FP16, BF16, FP32, FP64:
		return s.floatElement(p)
	}
	return s.intElement(p)
}

func (s *scanner) intElement(p *dataParser) error {
	// One pass over the digits; the common case (at most 19 digits, no
	// fraction or exponent) needs nothing else.
	s.ws()
	b, start := s.buf, s.pos
	i := start
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	d0 := i
	var u uint64
	for i < len(b) && b[i]-'0' <= 9 {
		u = u*10 + uint64(b[i]-'0')
		i++
	}
	digits := i - d0
	if digits == 0 || digits > 19 || b[d0] == '0' && digits > 1 ||
		i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		// Rare or wrong: let the full grammar decide and explain.
		text, isInt, err := s.number()
		if err != nil {
			return err
		}
		if !isInt {
			return fmt.Errorf("%s is not an integer, as %s needs", text, p.dt)
		}
		var ok bool
		if u, ok = parseUint(text[btoi(neg):]); !ok {
			return fmt.Errorf("%s is out of range for %s", text, p.dt)
		}
		i = s.pos
	}
	s.pos = i
	v := u
	if neg {
		if u > p.maxNeg {
			return fmt.Errorf("%s is out of range for %s", b[start:i], p.dt)
		}
		v = -u
	} else if u > p.maxPos {
		return fmt.Errorf("%s is out of range for %s", b[start:i], p.dt)
	}
	switch p.size {
	case 1:
		p.out = append(p.out, byte(v))
	case 2:
		p.out = binary.LittleEndian.AppendUint16(p.out, uint16(v))
	case 4:
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(v))
	default:
		p.out = binary.LittleEndian.AppendUint64(p.out, v)
	}
	return nil
}

func (s *scanner) floatElement(p *dataParser) error {
	var f float64
	switch c := s.peek(); {
	case c == 'N' && s.literal("NaN"):
		f = math.NaN()
	case c == 'I' && s.literal("Infinity"):
		f = math.Inf(1)
	case c == '-' && s.literal("-Infinity"):
		f = math.Inf(-1)
	default:
		text, _, err := s.number()
		if err != nil {
			return err
		}
		bits := 64
		if p.dt == FP32 {
			bits = 32
		}
		f, err = strconv.ParseFloat(string(text), bits)
		if err != nil {
			return fmt.Errorf("%s is out of range for %s", text, p.dt)
		}
		if !math.IsInf(f, 0) {
			var h uint16
			switch p.dt {
			case FP16:
				h = HalfFromFloat64(f)
			case BF16:
				h = BF16FromFloat64(f)
			}
			if h&0x7fff == 0x7c00 && p.dt == FP16 || h&0x7fff == 0x7f80 && p.dt == BF16 {
				return fmt.Errorf("%s is out of range for %s", text, p.dt)
			}
		}
	}
	switch p.dt {
	case FP16:
		p.out = binary.LittleEndian.AppendUint16(p.out, HalfFromFloat64(f))
	case BF16:
		p.out = binary.LittleEndian.AppendUint16(p.out, BF16FromFloat64(f))
	case FP32:
		p.out = binary.LittleEndian.AppendUint32(p.out, math.Float32bits(float32(f)))
	default:
		p.out = binary.LittleEndian.AppendUint64(p.out, math.Float64bits(f))
	}
	return nil
}

// appendJSONData writes data (elements of dt, already validated) as a flat
// JSON array. With strictUTF8 a BYTES element that is not valid UTF-8 is an
// error instead of being written with U+FFFD.
func appendJSONData(dst []byte, dt Datatype, data []byte, strictUTF8 bool) ([]byte, error) {
	dst = append(dst, '[')
	le := binary.LittleEndian
	size := dt.Size()
	for off, i := 0, 0; off < len(data); i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch dt {
		case Bool:
			if data[off] != 0 {
				dst = append(dst, "true"...)
			} else {
				dst = append(dst, "false"...)
			}
		case Uint8:
			dst = strconv.AppendUint(dst, uint64(data[off]), 10)
		case Uint16:
			dst = strconv.AppendUint(dst, uint64(le.Uint16(data[off:])), 10)
		case Uint32:
			dst = strconv.AppendUint(dst, uint64(le.Uint32(data[off:])), 10)
		case Uint64:
			dst = strconv.AppendUint(dst, le.Uint64(data[off:]), 10)
		case Int8:
			dst = strconv.AppendInt(dst, int64(int8(data[off])), 10)
		case Int16:
			dst = strconv.AppendInt(dst, int64(int16(le.Uint16(data[off:]))), 10)
		case Int32:
			dst = strconv.AppendInt(dst, int64(int32(le.Uint32(data[off:]))), 10)
		case Int64:
			dst = strconv.AppendInt(dst, int64(le.Uint64(data[off:])), 10)
		case FP16:
			dst = appendHalf(dst, le.Uint16(data[off:]), HalfToFloat32, HalfFromFloat64)
		case BF16:
			dst = appendHalf(dst, le.Uint16(data[off:]), BF16ToFloat32, BF16FromFloat64)
		case FP32:
			dst = appendFloat(dst, float64(math.Float32frombits(le.Uint32(data[off:]))))
		case FP64:
			dst = appendFloat(dst, math.Float64frombits(le.Uint64(data[off:])))
		case Bytes:
			l := int(le.Uint32(data[off:]))
			off += 4
			if strictUTF8 && !utf8.Valid(data[off:off+l]) {
				return dst, fmt.Errorf("BYTES element %d is not valid UTF-8, which JSON cannot carry; send it in binary form", i)
			}
			dst = appendJSONString(dst, data[off:off+l])
			off += l
			continue
		default:
			return dst, fmt.Errorf("unknown datatype %q", dt)
		}
		off += size
	}
	return append(dst, ']'), nil
}

// appendFloat writes a float as Triton does, so an answer through the proxy
// reads byte for byte as Triton's own: Triton's JSON writer (rapidjson)
// widens FP32 to a double and writes the shortest decimal that reads back to
// that double, always with a decimal point or an exponent: 4 is "4.0", the
// float32 nearest 1.3 is "1.2999999523162842", 1e-7 is "1e-7", 1e21 is
// "1e21". Non-finite values are written as the tokens NaN, Infinity and
// -Infinity, as Python's json module does, since JSON has no numbers for them.
//
// The digits come from grisu2 (grisu.go), rapidjson's own algorithm, not
// from strconv: the two differ in the last digit of some 17-digit values.
func appendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case f == 0:
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var digits [24]byte
	d, k := grisu2(digits[:0], f)
	// As rapidjson's Prettify: the value is 0.d1d2...dn x 10^kk.
	n := len(d)
	kk := n + k
	switch {
	case n <= kk && kk <= 21: // 1234e7 -> 12340000000.0
		dst = append(dst, d...)
		for range kk - n {
			dst = append(dst, '0')
		}
		return append(dst, ".0"...)
	case 0 < kk && kk <= 21: // 1234e-2 -> 12.34
		dst = append(dst, d[:kk]...)
		dst = append(dst, '.')
		return append(dst, d[kk:]...)
	case -6 < kk && kk <= 0: // 1234e-6 -> 0.001234
		dst = append(dst, "0."...)
		for range -kk {
			dst = append(dst, '0')
		}
		return append(dst, d...)
	}
	dst = append(dst, d[0]) // 1e30, 1.234e33, 1e-7
	if n > 1 {
		dst = append(dst, '.')
		dst = append(dst, d[1:]...)
	}
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(kk-1), 10)
}

// appendHalf writes a 16-bit float with the fewest significant digits that
// read back to the same bits (5 always suffice for FP16, 4 for BF16), e.g.
// 0.1 rather than its exact value 0.0999755859375.
func appendHalf(dst []byte, h uint16, widen func(uint16) float32, narrow func(float64) uint16) []byte {
	f := float64(widen(h))
	if math.IsNaN(f) || math.IsInf(f, 0) || f == 0 {
		return appendFloat(dst, f)
	}
	var buf [32]byte
	for digits := 1; digits < 9; digits++ {
		short, err := strconv.ParseFloat(string(strconv.AppendFloat(buf[:0], f, 'e', digits-1, 64)), 64)
		if err == nil && narrow(short) == h {
			return appendFloat(dst, short)
		}
	}
	return appendFloat(dst, f)
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string. Bytes that are not valid
// UTF-8 become U+FFFD, as in encoding/json: JSON text cannot carry them.
func appendJSONString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// HalfFromFloat64 rounds f to the nearest IEEE 754 binary16 (ties to even)
// and returns its bits. Overflow gives infinity; NaN stays NaN.
func HalfFromFloat64(f float64) uint16 { return narrowFloat(f, 5, 10) }

// BF16FromFloat64 rounds f to the nearest bfloat16 (ties to even) and
// returns its bits.
func BF16FromFloat64(f float64) uint16 { return narrowFloat(f, 8, 7) }

// HalfToFloat32 widens binary16 bits to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant * 2^-24, exact in float32.
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// BF16ToFloat32 widens bfloat16 bits to float32 exactly.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// narrowFloat rounds a float64 to a binary format with expBits exponent and
// mantBits fraction bits (at most 16 bits in all), to nearest, ties to even.
func narrowFloat(f float64, expBits, mantBits uint) uint16 {
	bits := math.Float64bits(f)
	sign := uint16(bits>>63) << (expBits + mantBits)
	exp := int(bits>>52) & 0x7ff
	frac := bits & (1<<52 - 1)
	infBits := uint16(1<<expBits-1) << mantBits
	if exp == 0x7ff {
		if frac != 0 {
			return sign | infBits | 1<<(mantBits-1) // quiet NaN
		}
		return sign | infBits
	}
	if exp == 0 { // float64 zero or subnormal: far below any 16-bit format
		return sign
	}
	bias := 1<<(expBits-1) - 1
	e := exp - 1023
	m := frac | 1<<52 // 53 significant bits
	if e > bias {
		return sign | infBits
	}
	var shift uint
	var base uint64
	if e >= 1-bias { // normal
		shift = 52 - mantBits
		base = uint64(e+bias-1) << mantBits // adding m>>shift (with its implicit 1) bumps exp by one
	} else { // subnormal: count units of 2^(1-bias-mantBits)
		s := 52 + 1 - bias - int(mantBits) - e
		if s >= 64 {
			return sign
		}
		shift = uint(s)
	}
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint64(1) << (shift - 1)
	if rem > half || rem == half && r&1 == 1 {
		r++
	}
	// A carry out of the fraction rolls into the exponent, and out of the
	// largest exponent into infinity: exactly the IEEE encoding.
	return sign | uint16(base+r)
}
