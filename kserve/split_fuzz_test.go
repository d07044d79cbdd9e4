package kserve

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// layoutCallers are the requests of a batch that layout, a fuzzed number,
// describes: 1 to 6 callers of 1 to 4 rows each, each asking for every
// output or for some by name, in JSON or binary form.
func layoutCallers(layout uint64) []*Request {
	n := 1 + int(layout%6)
	layout /= 6
	reqs := make([]*Request, n)
	for c := range reqs {
		rows := 1 + int64(layout%4)
		layout /= 4
		r := &Request{ID: fmt.Sprint("caller-", c), Inputs: []Tensor{{Name: "IN", Datatype: Uint8, Shape: []int64{rows}, Data: make([]byte, rows)}}}
		want := layout % 8 // bit k: OUTk by name; 0: every output
		layout /= 8
		for k := range 3 {
			if want&(1<<k) != 0 {
				r.Outputs = append(r.Outputs, RequestedOutput{Name: fmt.Sprint("OUT", k), Parameters: Parameters{ParamBinaryData: layout&1 == 1}})
				layout /= 2
			}
		}
		if layout&1 == 1 {
			r.Parameters = Parameters{ParamBinaryDataOutput: true}
		}
		layout /= 2
		reqs[c] = r
	}
	return reqs
}

// rowBounds cuts a batched output into its rows by its own datatype,
// shape and data, independently of Split: bounds[i] is the byte offset of
// row i, bounds[rows] the end. ok is false when the data does not fill
// the shape.
func rowBounds(t *Tensor) (bounds []int, ok bool) {
	if len(t.Shape) == 0 || t.Shape[0] < 0 {
		return nil, false
	}
	rows := t.Shape[0]
	elems := int64(1)
	for _, d := range t.Shape {
		if d < 0 || (d > 0 && elems > (1<<40)/d) {
			return nil, false
		}
		elems *= d
	}
	var starts []int // of each element, and the end
	if size := t.Datatype.Size(); size > 0 {
		if int64(len(t.Data)) != elems*int64(size) {
			return nil, false
		}
		for e := int64(0); e <= elems; e++ {
			starts = append(starts, int(e)*size)
		}
	} else {
		off := 0
		for off < len(t.Data) {
			starts = append(starts, off)
			if len(t.Data)-off < 4 {
				return nil, false
			}
			l := int(binary.LittleEndian.Uint32(t.Data[off:]))
			if l > len(t.Data)-off-4 {
				return nil, false
			}
			off += 4 + l
		}
		starts = append(starts, off)
		if int64(len(starts)-1) != elems {
			return nil, false
		}
	}
	if rows == 0 {
		return []int{0}, true
	}
	per := elems / rows
	for r := int64(0); r <= rows; r++ {
		bounds = append(bounds, starts[r*per])
	}
	return bounds, true
}

// FuzzSplitRows: a batch of up to six callers and any upstream answer, in
// JSON or binary form, decoded and split as the dispatcher's sendMerged
// does. Split either fails, or gives each caller exactly
// the outputs it asked for (every one when it named none), each with its
// own rows of the answer, at its offsets, in the shape and datatype the
// answer gave, in the form it asked for: never a row of a neighbour's,
// never a row short or over. An answer whose outputs do not have the
// batch's rows, or whose data does not fill its shape, must fail.
func FuzzSplitRows(f *testing.F) {
	for _, layout := range []uint64{0, 1, 5, 6*4*8*2*2 + 3, 12345, 987654321, 1<<40 + 77} {
		reqs := layoutCallers(layout)
		b, err := MergeSameKey(reqs)
		if err != nil {
			panic(err)
		}
		total := b.Rows
		strs := make([][]byte, total*2)
		for i := range strs {
			strs[i] = bytes.Repeat([]byte{'a' + byte(i%26)}, i%5)
		}
		o0, _ := NewTensor("OUT0", []int64{total, 2}, make([]float32, 2*total))
		o1, _ := NewBytesTensor("OUT1", []int64{total, 2}, strs)
		o2, _ := NewTensor("OUT2", []int64{total}, make([]int64, total))
		for i := range o0.Data {
			o0.Data[i] = byte(i)
		}
		for i := range o2.Data {
			o2.Data[i] = byte(3 * i)
		}
		for _, binary := range []bool{false, true} {
			o0.Binary, o1.Binary, o2.Binary = binary, binary, binary
			body, hl, err := AppendResponse(nil, &Response{ModelName: "m", Outputs: []Tensor{o0, o1, o2}})
			if err != nil {
				panic(err)
			}
			f.Add(body, hl, layout)
		}
		// A row short and a row over, as a broken upstream sends them.
		short := fmt.Sprintf(`{"outputs":[{"name":"OUT2","datatype":"INT64","shape":[%d],"parameters":{"binary_data_size":%d}}]}`, total-1, 8*(total-1))
		f.Add(append([]byte(short), o2.Data[:8*(total-1)]...), len(short), layout)
		over := fmt.Sprintf(`{"outputs":[{"name":"OUT2","datatype":"INT64","shape":[%d],"data":%s}]}`, total+1, mustJSON(make([]int64, total+1)))
		f.Add([]byte(over), -1, layout)
	}
	f.Fuzz(func(t *testing.T, body []byte, headerLen int, layout uint64) {
		resp, err := DecodeResponse(body, headerLen)
		if err != nil {
			return
		}
		reqs := layoutCallers(layout)
		b, err := MergeSameKey(reqs) // as a dispatcher queue merges them (sendMerged)
		if err != nil {
			t.Fatalf("merge: %v", err)
		}
		parts, err := b.Split(resp)
		if err != nil {
			return
		}
		bounds := map[string][]int{}
		for i := range resp.Outputs {
			o := &resp.Outputs[i]
			bs, ok := rowBounds(o)
			if !ok || o.Shape[0] != b.Rows {
				t.Fatalf("split accepted output %q of shape %v, %d data bytes, for a batch of %d rows", o.Name, o.Shape, len(o.Data), b.Rows)
			}
			bounds[o.Name] = bs
		}
		if len(parts) != len(reqs) {
			t.Fatalf("%d answers for %d callers", len(parts), len(reqs))
		}
		for c, p := range parts {
			req, cl := reqs[c], b.Callers[c]
			if p.ID != req.ID {
				t.Fatalf("caller %d got id %q, want %q", c, p.ID, req.ID)
			}
			var want []string
			if len(req.Outputs) == 0 {
				for _, o := range resp.Outputs {
					want = append(want, o.Name)
				}
			} else {
				for _, o := range req.Outputs {
					want = append(want, o.Name)
				}
			}
			var got []string
			for _, o := range p.Outputs {
				got = append(got, o.Name)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("caller %d got outputs %q, asked for %q", c, got, want)
			}
			for _, o := range p.Outputs {
				src := &resp.Outputs[slices.IndexFunc(resp.Outputs, func(t Tensor) bool { return t.Name == o.Name })]
				bs := bounds[o.Name]
				mine := src.Data[bs[cl.Start]:bs[cl.Start+cl.Rows]]
				if !bytes.Equal(o.Data, mine) {
					t.Fatalf("caller %d (rows %d..%d of %d) got output %q bytes %x, its rows are %x",
						c, cl.Start, cl.Start+cl.Rows, b.Rows, o.Name, o.Data, mine)
				}
				if wantShape := append([]int64{cl.Rows}, src.Shape[1:]...); !slices.Equal(o.Shape, wantShape) || o.Datatype != src.Datatype {
					t.Fatalf("caller %d output %q: %s %v, want %s %v", c, o.Name, o.Datatype, o.Shape, src.Datatype, wantShape)
				}
				if o.Binary != req.OutputBinary(o.Name) {
					t.Fatalf("caller %d output %q binary %v, asked %v", c, o.Name, o.Binary, req.OutputBinary(o.Name))
				}
			}
		}
	})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
