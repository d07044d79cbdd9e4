package kserve

import (
	"math"
	"math/big"
	"math/bits"
)

// Triton writes JSON numbers with rapidjson, whose double-to-text is Grisu2
// (Loitsch 2010): fast, always reads back to the same double, but for a few
// percent of 17-digit values not the shortest nor the closest of the
// candidates Go's exact algorithm would pick (3.3999999521443644e38 where Go
// writes ...642e38). To answer byte for byte as Triton does, grisu2 below
// follows rapidjson's internal/dtoa.h step for step: the same cached powers
// of ten, the same rounded 64-bit products, the same digit generation and
// rounding of the last digit, with the one departure Triton's build shows.

// diyFp is f x 2^e with a 64-bit significand.
type diyFp struct {
	f uint64
	e int
}

const (
	dpSignificandMask = 1<<52 - 1
	dpHiddenBit       = 1 << 52
	dpExponentBias    = 0x3FF + 52
	dpMinExponent     = -dpExponentBias
)

func diyFromFloat(d float64) diyFp {
	u := math.Float64bits(d)
	biased := int(u >> 52 & 0x7FF)
	sig := u & dpSignificandMask
	if biased != 0 {
		return diyFp{sig + dpHiddenBit, biased - dpExponentBias}
	}
	return diyFp{sig, dpMinExponent + 1}
}

// mul is rapidjson's DiyFp::operator*: the high 64 bits of the product,
// rounded half up on bit 63 of the low half.
func (x diyFp) mul(y diyFp) diyFp {
	hi, lo := bits.Mul64(x.f, y.f)
	if lo&(1<<63) != 0 {
		hi++
	}
	return diyFp{hi, x.e + y.e + 64}
}

func (x diyFp) normalize() diyFp {
	s := bits.LeadingZeros64(x.f)
	return diyFp{x.f << s, x.e - s}
}

func (x diyFp) normalizeBoundary() diyFp {
	for x.f&(dpHiddenBit<<1) == 0 {
		x.f <<= 1
		x.e--
	}
	return diyFp{x.f << 10, x.e - 10}
}

func (x diyFp) normalizedBoundaries() (minus, plus diyFp) {
	plus = diyFp{x.f<<1 + 1, x.e - 1}.normalizeBoundary()
	if x.f == dpHiddenBit {
		minus = diyFp{x.f<<2 - 1, x.e - 2}
	} else {
		minus = diyFp{x.f<<1 - 1, x.e - 1}
	}
	minus.f <<= uint(minus.e - plus.e)
	minus.e = plus.e
	return minus, plus
}

// cachedPowers are 10^-348, 10^-340, ..., 10^340 as normalized diyFps,
// correctly rounded to 64 bits (the table rapidjson and double-conversion
// carry as constants, computed here once).
var cachedPowers = func() [87]diyFp {
	var out [87]diyFp
	ten := big.NewInt(10)
	for i := range out {
		k := -348 + 8*i
		p := new(big.Int).Exp(ten, big.NewInt(int64(abs(k))), nil)
		v := new(big.Float).SetPrec(64).SetMode(big.ToNearestEven)
		if k >= 0 {
			v.SetInt(p)
		} else {
			v.Quo(new(big.Float).SetPrec(64).SetInt64(1), new(big.Float).SetPrec(2048).SetInt(p))
		}
		mant := new(big.Float)
		exp := v.MantExp(mant) // v = mant x 2^exp, 0.5 <= mant < 1
		f, _ := mant.SetMantExp(mant, 64).Uint64()
		out[i] = diyFp{f, exp - 64}
	}
	return out
}()

func abs(k int) int {
	if k < 0 {
		return -k
	}
	return k
}

func cachedPower(e int) (diyFp, int) {
	dk := float64(-61-e)*0.30102999566398114 + 347
	k := int(dk)
	if dk-float64(k) > 0 {
		k++
	}
	index := k>>3 + 1
	return cachedPowers[index], -(-348 + index<<3)
}

var pow10 = [20]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

func grisuRound(buf []byte, delta, rest, tenKappa, wpW uint64) {
	for rest < wpW && delta-rest >= tenKappa && (rest+tenKappa < wpW || wpW-rest > rest+tenKappa-wpW) {
		buf[len(buf)-1]--
		rest += tenKappa
	}
}

func countDecimalDigit32(n uint32) int {
	for d, p := 1, uint32(10); d < 9; d, p = d+1, p*10 {
		if n < p {
			return d
		}
	}
	return 9
}

func digitGen(w, mp diyFp, delta uint64, buf []byte, k int) ([]byte, int) {
	one := diyFp{1 << uint(-mp.e), mp.e}
	wpW := mp.f - w.f
	p1 := uint32(mp.f >> uint(-one.e))
	p2 := mp.f & (one.f - 1)
	kappa := countDecimalDigit32(p1)
	for kappa > 0 {
		div := uint32(pow10[kappa-1])
		d := p1 / div
		p1 %= div
		if d != 0 || len(buf) > 0 {
			buf = append(buf, byte('0'+d))
		}
		kappa--
		if tmp := uint64(p1)<<uint(-one.e) + p2; tmp <= delta {
			k += kappa
			grisuRound(buf, delta, tmp, pow10[kappa]<<uint(-one.e), wpW)
			return buf, k
		}
	}
	for {
		p2 *= 10
		delta *= 10
		d := byte(p2 >> uint(-one.e))
		if d != 0 || len(buf) > 0 {
			buf = append(buf, '0'+d)
		}
		p2 &= one.f - 1
		kappa--
		if p2 < delta {
			k += kappa
			// Here Triton's build departs from rapidjson's source as
			// published today: its last digit is never rounded down once
			// 9 or more digits came from this loop (rapidjson 1.1.0 reads
			// a 10-entry power table out of bounds here). The rule below
			// reproduces tritonserver 2.51 on 20000 random FP32 and FP64
			// values, every one byte for byte (tests/triton/
			// test_json_numbers.py checks it live).
			index := -kappa
			var scale uint64
			if index < 9 {
				scale = pow10[index]
			}
			grisuRound(buf, delta, p2, one.f, wpW*scale)
			return buf, k
		}
	}
}

// grisu2 appends the digits of v > 0 (finite) to buf and returns them with
// the decimal exponent K: v ~ digits x 10^K.
func grisu2(buf []byte, v float64) ([]byte, int) {
	d := diyFromFloat(v)
	wm, wp := d.normalizedBoundaries()
	c, k := cachedPower(wp.e)
	w := d.normalize().mul(c)
	wp = wp.mul(c)
	wm = wm.mul(c)
	wm.f++
	wp.f--
	return digitGen(w, wp, wp.f-wm.f, buf, k)
}
