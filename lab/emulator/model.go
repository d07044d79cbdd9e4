package emulator

import (
	"encoding/binary"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/lab/preset"
)

// SimpleMaxBatch is the simple model's max_batch_size, as Triton's example.
const SimpleMaxBatch = 8

// maxSimpleMaxBatch bounds Options.SimpleMaxBatch: a batch of it is a few
// hundred KB of rows.
const maxSimpleMaxBatch = 4096

// The models every emulator serves.
const (
	// SimpleModel mirrors Triton's example "simple": INPUT0 and INPUT1,
	// INT32 [-1,16], max_batch_size 8; OUTPUT0 = INPUT0+INPUT1 and
	// OUTPUT1 = INPUT0-INPUT1 (two's-complement wrap-around).
	SimpleModel = "simple"
	// NoBatchModel is "simple" without batching (max_batch_size 0, shapes
	// [16]): the proxy must pass its requests through one by one.
	NoBatchModel = "simple_nobatch"
	// ImageModel stands for an image classifier: INPUT__0 FP32 [-1,3,224,224]
	// in, OUTPUT__0 FP32 [-1,1000] out, max_batch_size from the preset.
	// OUTPUT__0[k] is the sum of the row's input elements whose flat index
	// is k modulo 1000, so every output depends on its own row only and a
	// mix-up between callers shows.
	ImageModel = "image"
)

// modelVersion is the only version of every model, as a Triton repository
// with one version directory "1" would report it.
const modelVersion = "1"

// tensorSpec is a model input or output; dims exclude the batch dimension.
type tensorSpec struct {
	name     string
	datatype kserve.Datatype
	dims     []int64
}

// rowBytes is the size of one row (one batch element) of the tensor.
func (t tensorSpec) rowBytes() int {
	n := int64(t.datatype.Size())
	for _, d := range t.dims {
		n *= d
	}
	return int(n)
}

// model is one emulated model: its interface, its math, its timing and its
// statistics.
type model struct {
	name     string
	maxBatch int // 0: the model does not batch
	inputs   []tensorSpec
	outputs  []tensorSpec
	// compute fills outs[i] (len rows*outputs[i].rowBytes()) from ins[i]
	// (len rows*inputs[i].rowBytes()), both in spec order.
	compute func(rows int, ins, outs [][]byte)

	timing    preset.Profile // tau(b) and zeta(b) of one batch
	instances int
	pool      *instancePool
	stats     *modelStats
	ready     atomic.Bool
}

// batching reports whether the first dimension of every tensor is the batch.
func (m *model) batching() bool { return m.maxBatch > 0 }

// shape is the tensor's full shape as the model metadata reports it, with
// -1 for the batch dimension of a batching model.
func (m *model) shape(t tensorSpec) []int64 {
	if !m.batching() {
		return t.dims
	}
	return append([]int64{-1}, t.dims...)
}

func newModels(p preset.Profile, instances, simpleMax int) []*model {
	simpleIn := []tensorSpec{
		{name: "INPUT0", datatype: kserve.Int32, dims: []int64{16}},
		{name: "INPUT1", datatype: kserve.Int32, dims: []int64{16}},
	}
	simpleOut := []tensorSpec{
		{name: "OUTPUT0", datatype: kserve.Int32, dims: []int64{16}},
		{name: "OUTPUT1", datatype: kserve.Int32, dims: []int64{16}},
	}
	simple := p
	simple.MaxBatch = simpleMax
	ms := []*model{
		{name: SimpleModel, maxBatch: simpleMax, inputs: simpleIn, outputs: simpleOut, compute: sumDiff, timing: simple},
		{name: NoBatchModel, maxBatch: 0, inputs: simpleIn, outputs: simpleOut, compute: sumDiff, timing: simple},
		{
			name:     ImageModel,
			maxBatch: p.MaxBatch,
			inputs:   []tensorSpec{{name: "INPUT__0", datatype: kserve.FP32, dims: []int64{3, 224, 224}}},
			outputs:  []tensorSpec{{name: "OUTPUT__0", datatype: kserve.FP32, dims: []int64{imageClasses}}},
			compute:  foldSum,
			timing:   p,
		},
	}
	for _, m := range ms {
		m.instances = instances
		m.pool = newInstancePool(instances)
		m.stats = newModelStats(m.name, modelVersion)
		m.ready.Store(true)
	}
	return ms
}

// sumDiff is the math of Triton's "simple": OUTPUT0 = INPUT0 + INPUT1,
// OUTPUT1 = INPUT0 - INPUT1, element-wise on INT32.
func sumDiff(_ int, ins, outs [][]byte) {
	a, b := ins[0], ins[1]
	sum, diff := outs[0], outs[1]
	for i := 0; i+4 <= len(a); i += 4 {
		x := int32(binary.LittleEndian.Uint32(a[i:]))
		y := int32(binary.LittleEndian.Uint32(b[i:]))
		binary.LittleEndian.PutUint32(sum[i:], uint32(x+y))
		binary.LittleEndian.PutUint32(diff[i:], uint32(x-y))
	}
}

const imageClasses = 1000

// foldSum is the image model's math: per row, out[k] is the sum of the
// input elements whose flat index is k modulo imageClasses. It reads every
// byte of a large request, so it is written for speed: a GPU server spends
// little host CPU on a tensor, and an emulator that spends 40 ms on a
// 60 MB batch takes a core from the proxy beside it on a small machine.
func foldSum(rows int, ins, outs [][]byte) {
	in, out := ins[0], outs[0]
	inRow, outRow := len(in)/rows, len(out)/rows
	var acc [imageClasses]float64
	for r := 0; r < rows; r++ {
		clear(acc[:])
		foldRow(&acc, in[r*inRow:(r+1)*inRow])
		o := out[r*outRow : (r+1)*outRow]
		for k := range imageClasses {
			binary.LittleEndian.PutUint32(o[4*k:], math.Float32bits(float32(acc[k])))
		}
	}
}

// littleEndian: the machine's floats are the wire's (KServe v2 binary data
// is little-endian), so a chunk copied into a []float32 reads as is.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// foldRow adds row's FP32 elements into acc, element i into acc[i mod
// imageClasses]. On a little-endian machine it copies each chunk of
// imageClasses elements into an aligned []float32 (the row's data starts
// wherever the request's JSON header ended) and sums that, nearly four
// times faster than decoding element by element (BenchmarkFoldSum).
func foldRow(acc *[imageClasses]float64, row []byte) {
	if !littleEndian {
		for len(row) >= 4 {
			chunk := row[:min(len(row), 4*imageClasses)]
			row = row[len(chunk):]
			for k := range len(chunk) / 4 {
				acc[k] += float64(math.Float32frombits(binary.LittleEndian.Uint32(chunk[4*k:])))
			}
		}
		return
	}
	var f [imageClasses]float32
	fb := unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*imageClasses)
	for len(row) >= 4 {
		n := copy(fb, row)
		row = row[n:]
		for k, v := range f[:n/4] {
			acc[k] += float64(v)
		}
	}
}

// outputBytes is the size of every output of a batch of rows, the bytes an
// answer carries (before any JSON encoding).
func (m *model) outputBytes(rows int) int {
	n := 0
	for _, o := range m.outputs {
		n += rows * o.rowBytes()
	}
	return n
}
