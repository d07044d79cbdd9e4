package kserve

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFloatsAsTriton: JSON floats read byte for byte as tritonserver 2.51
// writes them. The expected strings were captured from Triton's own answers
// (an identity model per datatype, tests/triton/test_json_numbers.py does
// the same comparison live).
func TestFloatsAsTriton(t *testing.T) {
	tests := []struct {
		dt   Datatype
		in   []float64
		want string
	}{
		{FP32, []float64{4, 1.3, 0.1, -2.5, 1e-7, 3.4e38, 16777217, 0, math.Copysign(0, -1), 1e21, 123456789},
			"[4.0,1.2999999523162842,0.10000000149011612,-2.5,1.0000000116860974e-7,3.3999999521443644e38,16777216.0,0.0,-0.0,1.0000000200408774e21,123456792.0]"},
		{FP64, []float64{4, 1.3, 0.1, 1e-7, 1e300, 0, 1e21, 123456789012, 5e-324},
			"[4.0,1.3,0.1,1e-7,1e300,0.0,1e21,123456789012.0,5e-324]"},
	}
	for _, tt := range tests {
		var raw []byte
		for _, f := range tt.in {
			if tt.dt == FP32 {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(f)))
			} else {
				raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(f))
			}
		}
		got, err := appendJSONData(nil, tt.dt, raw, false)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.dt, got, tt.want)
		}
	}
}

// TestFloatsAsTritonCaptured replays values tritonserver 2.51 echoed
// (random bit patterns, normal and uniform draws; testdata/triton_floats.json
// holds the raw little-endian values and Triton's JSON text for them).
func TestFloatsAsTritonCaptured(t *testing.T) {
	data, err := os.ReadFile("testdata/triton_floats.json")
	if err != nil {
		t.Fatal(err)
	}
	var captured map[Datatype]struct{ Hex, Text string }
	if err := json.Unmarshal(data, &captured); err != nil {
		t.Fatal(err)
	}
	for _, dt := range []Datatype{FP32, FP64} {
		c := captured[dt]
		raw, err := hex.DecodeString(c.Hex)
		if err != nil || len(c.Text) == 0 {
			t.Fatalf("%s: bad testdata: %v", dt, err)
		}
		got, err := appendJSONData(nil, dt, raw, false)
		if err != nil {
			t.Fatal(err)
		}
		g, w := strings.Split(string(got[1:len(got)-1]), ","), strings.Split(c.Text, ",")
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, want %d", dt, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Errorf("%s value %d: %s, Triton writes %s", dt, i, g[i], w[i])
			}
		}
	}
}

// TestFloatFormRules covers each of rapidjson's forms, and that every form
// reads back to the same double.
func TestFloatFormRules(t *testing.T) {
	for in, want := range map[float64]string{
		123.456: "123.456", 1e-6: "0.000001", 0.00123: "0.00123", 1.5e-6: "0.0000015", 1.5e-7: "1.5e-7",
		-1e22: "-1e22", 1.5e22: "1.5e22",
		// Grisu2 is not always shortest; Triton writes these so.
		1.25e22: "1.2499999999999999e22", 1e23: "9.999999999999999e22", 1e20: "100000000000000000000.0", 123456789012345680000: "123456789012345680000.0",
	} {
		if got := string(appendFloat(nil, in)); got != want {
			t.Errorf("appendFloat(%g) = %s, want %s", in, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		s := string(appendFloat(nil, f))
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != f || !strings.ContainsAny(s, ".e") {
			t.Fatalf("appendFloat(%v) = %s, reads back as %v (%v)", f, s, back, err)
		}
	}
}

// FuzzAppendFloat: every finite double is written with a point or an
// exponent and reads back to itself.
func FuzzAppendFloat(f *testing.F) {
	for _, seed := range []uint64{0, math.Float64bits(4), math.Float64bits(1.3), math.Float64bits(float64(float32(3.4e38))), 1} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		s := string(appendFloat(nil, v))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != v || math.Signbit(back) != math.Signbit(v) || !strings.ContainsAny(s, ".e") {
			t.Fatalf("appendFloat(%v) = %q, reads back as %v (%v)", v, s, back, err)
		}
	})
}
