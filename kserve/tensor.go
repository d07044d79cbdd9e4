package kserve

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Element is a Go type with a fixed-size KServe datatype.
type Element interface {
	bool | uint8 | uint16 | uint32 | uint64 | int8 | int16 | int32 | int64 | float32 | float64
}

// DatatypeOf is the datatype that holds elements of type T (FP32 for
// float32; use NewHalfTensor or NewBF16Tensor for 16-bit floats).
func DatatypeOf[T Element]() Datatype {
	var zero T
	switch any(zero).(type) {
	case bool:
		return Bool
	case uint8:
		return Uint8
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case float32:
		return FP32
	}
	return FP64
}

// NewTensor builds a tensor of the datatype matching T from values in
// row-major order; their count must match the shape.
func NewTensor[T Element](name string, shape []int64, values []T) (Tensor, error) {
	dt := DatatypeOf[T]()
	if err := checkCount(name, shape, len(values)); err != nil {
		return Tensor{}, err
	}
	data, err := binary.Append(make([]byte, 0, len(values)*dt.Size()), binary.LittleEndian, values)
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	return Tensor{Name: name, Datatype: dt, Shape: shape, Data: data}, nil
}

// NewHalfTensor builds an FP16 tensor, rounding each value to nearest even.
func NewHalfTensor(name string, shape []int64, values []float32) (Tensor, error) {
	return newHalf(name, FP16, shape, values, HalfFromFloat64)
}

// NewBF16Tensor builds a BF16 tensor, rounding each value to nearest even.
func NewBF16Tensor(name string, shape []int64, values []float32) (Tensor, error) {
	return newHalf(name, BF16, shape, values, BF16FromFloat64)
}

func newHalf(name string, dt Datatype, shape []int64, values []float32, conv func(float64) uint16) (Tensor, error) {
	if err := checkCount(name, shape, len(values)); err != nil {
		return Tensor{}, err
	}
	data := make([]byte, 0, 2*len(values))
	for _, v := range values {
		data = binary.LittleEndian.AppendUint16(data, conv(float64(v)))
	}
	return Tensor{Name: name, Datatype: dt, Shape: shape, Data: data}, nil
}

// NewBytesTensor builds a BYTES tensor from its elements.
func NewBytesTensor(name string, shape []int64, values [][]byte) (Tensor, error) {
	if err := checkCount(name, shape, len(values)); err != nil {
		return Tensor{}, err
	}
	size := 0
	for _, v := range values {
		if uint64(len(v)) > math.MaxUint32 {
			return Tensor{}, fmt.Errorf("tensor %q: element of %d bytes exceeds the 4 GiB BYTES element limit", name, len(v))
		}
		size += 4 + len(v)
	}
	data := make([]byte, 0, size)
	for _, v := range values {
		data = AppendBytesElement(data, v)
	}
	return Tensor{Name: name, Datatype: Bytes, Shape: shape, Data: data}, nil
}

// AppendBytesElement appends one BYTES element (length, then bytes) to dst.
func AppendBytesElement(dst, elem []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(elem)))
	return append(dst, elem...)
}

func checkCount(name string, shape []int64, have int) error {
	n, err := ElementCount(shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	if n != int64(have) {
		return fmt.Errorf("tensor %q: shape %s needs %d elements, got %d", name, FormatShape(shape), n, have)
	}
	return nil
}

// Values decodes t's data into a new slice of T, whose datatype must match
// t's; float32 also reads FP16 and BF16, widening exactly.
func Values[T Element](t *Tensor) ([]T, error) {
	want := DatatypeOf[T]()
	half := want == FP32 && t.Datatype.Half()
	if t.Datatype != want && !half {
		return nil, fmt.Errorf("tensor %q: datatype is %s, not %s", t.Name, t.Datatype, want)
	}
	n, err := t.Elements()
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if err := checkData(t.Datatype, t.Shape, n, t.Data); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	out := make([]T, n)
	if half {
		f := any(out).([]float32)
		conv := HalfToFloat32
		if t.Datatype == BF16 {
			conv = BF16ToFloat32
		}
		for i := range f {
			f[i] = conv(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
		return out, nil
	}
	if _, err := binary.Decode(t.Data, binary.LittleEndian, out); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return out, nil
}

// BytesElements returns the elements of a BYTES tensor as slices of its
// data (not copies).
func (t *Tensor) BytesElements() ([][]byte, error) {
	if t.Datatype != Bytes {
		return nil, fmt.Errorf("tensor %q: datatype is %s, not BYTES", t.Name, t.Datatype)
	}
	n, err := t.Elements()
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if err := checkData(Bytes, t.Shape, n, t.Data); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	out := make([][]byte, 0, n)
	for off := 0; off < len(t.Data); {
		l := int(binary.LittleEndian.Uint32(t.Data[off:]))
		off += 4
		out = append(out, t.Data[off:off+l:off+l])
		off += l
	}
	return out, nil
}

// Int32s is Values[int32](t), for the common case.
func (t *Tensor) Int32s() ([]int32, error) { return Values[int32](t) }

// Float32s is Values[float32](t): FP32, FP16 or BF16 data as float32.
func (t *Tensor) Float32s() ([]float32, error) { return Values[float32](t) }

// CheckData verifies that t's Data holds exactly the elements its datatype
// and shape declare (for BYTES, well-formed length prefixes). Decoding the
// HTTP forms checks this itself; a request built another way (the gRPC
// door) must pass it before it may join a batch, or one caller's bad
// tensor would fail the whole batch when it is merged.
func (t *Tensor) CheckData() error {
	if !t.Datatype.Valid() {
		return fmt.Errorf("tensor %q: unknown datatype %q (want one of BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64, BYTES)", t.Name, t.Datatype)
	}
	n, err := t.Elements()
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if err := checkData(t.Datatype, t.Shape, n, t.Data); err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return nil
}
