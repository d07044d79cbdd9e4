package kserve

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// FuzzDecodeRequest: any body and header length either decodes or fails
// with a 400 *Error, never panics; what decodes re-encodes in binary form to
// the same tensors, and in its own forms to something that decodes again.
func FuzzDecodeRequest(f *testing.F) {
	for _, tc := range datatypeCases {
		f.Add([]byte(fmt.Sprintf(`{"inputs":[{"name":"x","datatype":%q,"shape":%s,"data":%s}]}`, tc.dt, tc.shape, tc.data)), -1)
		raw, _ := hexDecode(tc.raw)
		h := fmt.Sprintf(`{"inputs":[{"name":"x","datatype":%q,"shape":%s,"parameters":{"binary_data_size":%d}}]}`, tc.dt, tc.shape, len(raw))
		f.Add(append([]byte(h), raw...), len(h))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20 {
		body, hl := randomRequest(rng, randomModel(rng), fmt.Sprint(i))
		f.Add(body, hl)
	}
	f.Add([]byte(`{"id":"\u00e9","parameters":{"a":[1,{"b":null}],"c":1.5e3},"inputs":[{"name":"x","datatype":"INT8","shape":[2,1],"data":[[1],[-2]]}],"outputs":[{"name":"y","parameters":{"binary_data":true,"classification":2}}]}`), -1)
	f.Fuzz(func(t *testing.T, body []byte, headerLen int) {
		r, err := DecodeRequest(body, headerLen)
		checkDeferred(t, body, headerLen, r, err)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Msg == "" {
				t.Fatalf("error %T %q is not a 400 *Error", err, err)
			}
			return
		}
		if _, rows, ok := BatchKey(r); ok {
			if n, err := Rows(r); err != nil || n != rows {
				t.Fatalf("BatchKey rows %d, Rows %d (%v)", rows, n, err)
			}
		}
		bin, hl, err := AppendRequest(nil, r, true)
		if err != nil {
			t.Fatalf("decoded request does not re-encode in binary: %v", err)
		}
		again, err := DecodeRequest(bin, hl)
		if err != nil {
			t.Fatalf("binary re-encoding does not decode: %v\n%q", err, bin)
		}
		if len(again.Inputs) != len(r.Inputs) || again.ID != r.ID {
			t.Fatalf("binary round trip changed the request: %+v vs %+v", again, r)
		}
		for i := range r.Inputs {
			a, b := &r.Inputs[i], &again.Inputs[i]
			if a.Name != b.Name || a.Datatype != b.Datatype || !slices.Equal(a.Shape, b.Shape) || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("input %d changed in a binary round trip: %+v vs %+v", i, a, b)
			}
		}
		own, hl, err := AppendRequest(nil, r, false)
		if err != nil {
			return // e.g. binary BYTES that JSON cannot carry: refused, fine
		}
		if _, err := DecodeRequest(own, hl); err != nil {
			t.Fatalf("re-encoding in the original forms does not decode: %v\n%q", err, own)
		}
	})
}

// splitCallers are the requests whose batch FuzzSplit cuts: rows vary with
// the fuzzer's input; one caller wants all outputs as JSON, one OUT0 in
// binary, one OUT1 by request-level binary_data_output.
func splitCallers(rows [3]int64) []*Request {
	in := func(n int64) []Tensor {
		return []Tensor{{Name: "IN", Datatype: Uint8, Shape: []int64{n}, Data: make([]byte, n)}}
	}
	return []*Request{
		{ID: "all", Inputs: in(rows[0])},
		{ID: "out0", Inputs: in(rows[1]), Outputs: []RequestedOutput{{Name: "OUT0", Parameters: Parameters{ParamBinaryData: true}}}},
		{ID: "out1", Inputs: in(rows[2]), Parameters: Parameters{ParamBinaryDataOutput: true}, Outputs: []RequestedOutput{{Name: "OUT1"}}},
	}
}

// FuzzSplit: any batched response either splits or fails with an error,
// never panics; what splits gives each caller its own rows, which encode
// and decode again and, laid end to end, are the batched output.
func FuzzSplit(f *testing.F) {
	add := func(rows uint8, outs ...Tensor) {
		body, hl, err := AppendResponse(nil, &Response{ModelName: "m", ModelVersion: "1", Outputs: outs})
		if err != nil {
			panic(err)
		}
		f.Add(body, hl, rows)
	}
	strs := func(n int) [][]byte {
		v := make([][]byte, n)
		for i := range v {
			v[i] = []byte("é"[:i%3])
		}
		return v
	}
	for _, rows := range []uint8{0, 0x15, 0x3f} {
		total := rowsOf(rows)[0] + rowsOf(rows)[1] + rowsOf(rows)[2]
		a, _ := NewTensor("OUT0", []int64{total, 2}, make([]float32, 2*total))
		b, _ := NewBytesTensor("OUT1", []int64{total}, strs(int(total)))
		c, _ := NewTensor("OUT2", []int64{total}, make([]int64, total))
		a.Binary, c.Binary = true, true
		add(rows, a, b, c)
		b.Binary = true
		add(rows, a, b)
	}
	f.Fuzz(func(t *testing.T, body []byte, headerLen int, rowBits uint8) {
		resp, err := DecodeResponse(body, headerLen)
		if err != nil {
			return
		}
		reqs := splitCallers(rowsOf(rowBits))
		b, err := Merge(reqs)
		if err != nil {
			t.Fatalf("merge: %v", err)
		}
		parts, err := b.Split(resp)
		if err != nil {
			return
		}
		if len(parts) != len(reqs) {
			t.Fatalf("%d responses for %d callers", len(parts), len(reqs))
		}
		joined := map[string][]byte{}
		for c, p := range parts {
			if p.ID != reqs[c].ID {
				t.Fatalf("caller %d got id %q", c, p.ID)
			}
			for _, o := range p.Outputs {
				if !reqs[c].WantsOutput(o.Name) || o.Binary != reqs[c].OutputBinary(o.Name) {
					t.Fatalf("caller %d got output %q (binary %v) it did not ask for so", c, o.Name, o.Binary)
				}
				if o.Shape[0] != b.Callers[c].Rows {
					t.Fatalf("caller %d output %q has shape %v for %d rows", c, o.Name, o.Shape, b.Callers[c].Rows)
				}
				if c == 0 {
					joined[o.Name] = append(joined[o.Name], o.Data...)
				}
			}
			enc, hl, err := AppendResponse(nil, p)
			if err != nil {
				continue // JSON BYTES are replaced, never refused; other errors would show below
			}
			if _, err := DecodeResponse(enc, hl); err != nil {
				t.Fatalf("caller %d response does not decode: %v\n%q", c, err, enc)
			}
		}
		// Every caller owns a contiguous share; caller 0 (all outputs) starts
		// each output, and the shares of all callers tile it.
		for _, o := range resp.Outputs {
			if !bytes.HasPrefix(o.Data, joined[o.Name]) {
				t.Fatalf("output %q: caller 0's share is not the start of the batched data", o.Name)
			}
		}
	})
}

func rowsOf(bits uint8) [3]int64 {
	return [3]int64{1 + int64(bits&3), 1 + int64(bits>>2&3), 1 + int64(bits>>4&3)}
}

func hexDecode(s string) ([]byte, error) {
	b := make([]byte, len(s)/2)
	for i := range b {
		var v byte
		for _, c := range []byte(s[2*i : 2*i+2]) {
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | (c - '0')
			case c >= 'a' && c <= 'f':
				v = v<<4 | (c - 'a' + 10)
			default:
				return nil, fmt.Errorf("bad hex %q", s)
			}
		}
		b[i] = v
	}
	return b, nil
}

// checkDeferred: DecodeRequestDeferred then DecodeData accepts exactly what
// DecodeRequest does, with the same result, and refuses with a 400 *Error.
func checkDeferred(t *testing.T, body []byte, headerLen int, eager *Request, eagerErr error) {
	t.Helper()
	lazy, err := DecodeRequestDeferred(body, headerLen)
	if err == nil {
		err = lazy.DecodeData()
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || e.Msg == "" {
			t.Fatalf("deferred decoding: error %T %q is not a 400 *Error", err, err)
		}
	}
	switch {
	case (eagerErr == nil) != (err == nil):
		t.Fatalf("DecodeRequest error %v, deferred decoding error %v", eagerErr, err)
	case err == nil && !reflect.DeepEqual(eager, lazy):
		t.Fatalf("deferred decoding differs:\n%+v\n%+v", lazy, eager)
	}
}
