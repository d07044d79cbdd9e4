package loadgen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/ratebatch/ratebatch/kserve"
)

// A Verifier checks that an answer is the one its own request implies. A
// proxy that batches requests and hands one caller's result to another
// fails it, because every prebuilt request carries different data.
type Verifier interface {
	// Verify returns an error describing the first difference between the
	// outputs and what the inputs imply.
	Verify(inputs, outputs []kserve.Tensor) error
}

// VerifierFunc adapts a function to Verifier.
type VerifierFunc func(inputs, outputs []kserve.Tensor) error

// Verify calls f.
func (f VerifierFunc) Verify(inputs, outputs []kserve.Tensor) error { return f(inputs, outputs) }

// verifiers are the models Run can verify without Config.Verifier.
var verifiers = map[string]Verifier{
	"simple":         VerifierFunc(verifySimple),
	"simple_nobatch": VerifierFunc(verifySimple), // the emulator's simple without batching
}

// verifiable lists the models with a built-in verifier, sorted.
func verifiable() []string { return slices.Sorted(maps.Keys(verifiers)) }

// VerifierFor returns the built-in verifier of a model, by name.
func VerifierFor(model string) (Verifier, bool) {
	v, ok := verifiers[model]
	return v, ok
}

// verifySimple checks Triton's "simple" example model, which the emulator
// also serves: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1,
// element-wise, in the inputs' datatype (integers wrap as in C).
func verifySimple(inputs, outputs []kserve.Tensor) error {
	in0, err := tensorNamed(inputs, "INPUT0", "input")
	if err != nil {
		return err
	}
	in1, err := tensorNamed(inputs, "INPUT1", "input")
	if err != nil {
		return err
	}
	for _, o := range []struct {
		name string
		sub  bool
	}{{"OUTPUT0", false}, {"OUTPUT1", true}} {
		out, err := tensorNamed(outputs, o.name, "output")
		if err != nil {
			return err
		}
		if out.Datatype != in0.Datatype {
			return fmt.Errorf("%s has datatype %s, want %s", o.name, out.Datatype, in0.Datatype)
		}
		if !equalShape(out.Shape, in0.Shape) {
			return fmt.Errorf("%s has shape %s, want %s", o.name, kserve.FormatShape(out.Shape), kserve.FormatShape(in0.Shape))
		}
		want, err := addSub(in0, in1, o.sub)
		if err != nil {
			return err
		}
		if !bytes.Equal(out.Data, want) {
			return fmt.Errorf("%s differs from its inputs' %s at element %d", o.name,
				map[bool]string{false: "sum", true: "difference"}[o.sub], firstDiff(out.Data, want)/in0.Datatype.Size())
		}
	}
	return nil
}

func tensorNamed(ts []kserve.Tensor, name, what string) (*kserve.Tensor, error) {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i], nil
		}
	}
	return nil, fmt.Errorf("no %s named %s", what, name)
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// addSub returns a+b (or a-b) element-wise in the tensors' datatype.
func addSub(a, b *kserve.Tensor, sub bool) ([]byte, error) {
	if a.Datatype != b.Datatype || len(a.Data) != len(b.Data) {
		return nil, fmt.Errorf("INPUT0 and INPUT1 differ in datatype or size")
	}
	switch a.Datatype {
	case kserve.Int8, kserve.Uint8, kserve.Int16, kserve.Uint16, kserve.Int32, kserve.Uint32,
		kserve.Int64, kserve.Uint64, kserve.FP32, kserve.FP64:
	default:
		return nil, fmt.Errorf("cannot verify datatype %s (want an integer type, FP32 or FP64)", a.Datatype)
	}
	size := a.Datatype.Size()
	if len(a.Data)%size != 0 {
		return nil, fmt.Errorf("INPUT0 has %d bytes, not a whole number of %s elements", len(a.Data), a.Datatype)
	}
	out := make([]byte, len(a.Data))
	le := binary.LittleEndian
	for i := 0; i+size <= len(out); i += size {
		x, y, z := a.Data[i:i+size], b.Data[i:i+size], out[i:i+size]
		switch a.Datatype {
		case kserve.Int8, kserve.Uint8:
			if sub {
				z[0] = x[0] - y[0]
			} else {
				z[0] = x[0] + y[0]
			}
		case kserve.Int16, kserve.Uint16:
			le.PutUint16(z, uint16(wrap(uint64(le.Uint16(x)), uint64(le.Uint16(y)), sub)))
		case kserve.Int32, kserve.Uint32:
			le.PutUint32(z, uint32(wrap(uint64(le.Uint32(x)), uint64(le.Uint32(y)), sub)))
		case kserve.Int64, kserve.Uint64:
			le.PutUint64(z, wrap(le.Uint64(x), le.Uint64(y), sub))
		case kserve.FP32:
			p, q := math.Float32frombits(le.Uint32(x)), math.Float32frombits(le.Uint32(y))
			if sub {
				q = -q
			}
			le.PutUint32(z, math.Float32bits(p+q))
		case kserve.FP64:
			p, q := math.Float64frombits(le.Uint64(x)), math.Float64frombits(le.Uint64(y))
			if sub {
				q = -q
			}
			le.PutUint64(z, math.Float64bits(p+q))
		}
	}
	return out, nil
}

// wrap adds or subtracts in two's complement; callers truncate the result
// to their width, which is how C integer arithmetic wraps.
func wrap(x, y uint64, sub bool) uint64 {
	if sub {
		return x - y
	}
	return x + y
}
