package kserve

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// serve plays a Triton server in front of a deterministic, row-wise model:
// for every input X it computes output X_OUT (same datatype and shape, each
// row's elements reversed, numbers perturbed by their column, booleans
// negated, strings suffixed), plus COUNT, INT64 [rows,1], the elements per
// row of the first input by name. It then applies Triton's output selection: only
// the outputs the request names (all when none), each binary or JSON as
// asked. Because every output row depends only on the same input row,
// executing a batch equals executing its requests one by one.
func serve(req *Request) (*Response, error) {
	rows, err := Rows(req)
	if err != nil {
		return nil, err
	}
	// A model's outputs come in the model's order, whatever the order of
	// the request's inputs.
	inputs := slices.SortedFunc(slices.Values(req.Inputs), func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	var all []Tensor
	for i := range inputs {
		in := &inputs[i]
		n, err := in.Elements()
		if err != nil {
			return nil, err
		}
		perRow := int64(0)
		if rows > 0 {
			perRow = n / rows
		}
		out := Tensor{Name: in.Name + "_OUT", Datatype: in.Datatype, Shape: in.Shape}
		if in.Datatype == Bytes {
			els, err := in.BytesElements()
			if err != nil {
				return nil, err
			}
			for r := int64(0); r < rows; r++ {
				for c := perRow - 1; c >= 0; c-- {
					e := els[r*perRow+c]
					out.Data = AppendBytesElement(out.Data, append(bytes.Clone(e), fmt.Sprintf("!%d", c)...))
				}
			}
		} else {
			size := int64(in.Datatype.Size())
			out.Data = make([]byte, 0, len(in.Data))
			for r := int64(0); r < rows; r++ {
				for c := perRow - 1; c >= 0; c-- {
					at := (r*perRow + c) * size
					el := bytes.Clone(in.Data[at : at+size])
					if in.Datatype == Bool {
						el[0] = 1 - min(el[0], 1)
					} else {
						el[0] ^= byte(c*7 + 1)
					}
					out.Data = append(out.Data, el...)
				}
			}
		}
		all = append(all, out)
	}
	count := make([]int64, rows)
	if rows > 0 {
		n, _ := inputs[0].Elements()
		for i := range count {
			count[i] = n / rows
		}
	}
	ct, err := NewTensor("COUNT", []int64{rows, 1}, count)
	if err != nil {
		return nil, err
	}
	all = append(all, ct)

	resp := &Response{ModelName: "toy", ModelVersion: "1", ID: req.ID}
	if len(req.Outputs) == 0 {
		resp.Outputs = all
	} else {
		for _, o := range req.Outputs {
			found := false
			for _, t := range all {
				if t.Name == o.Name {
					resp.Outputs = append(resp.Outputs, t)
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("unexpected inference output %q", o.Name)
			}
		}
	}
	for i := range resp.Outputs {
		resp.Outputs[i].Binary = req.OutputBinary(resp.Outputs[i].Name)
	}
	return resp, nil
}

// wire encodes a response and decodes it back, as a proxy receives it.
func wire(resp *Response) (*Response, error) {
	body, hl, err := AppendResponse(nil, resp)
	if err != nil {
		return nil, err
	}
	return DecodeResponse(body, hl)
}

// serveBatch sends a batch through the wire to serve and splits the answer.
func serveBatch(b *Batch) ([]*Response, error) {
	body, hl := b.AppendBody(nil)
	req, err := DecodeRequest(body, hl)
	if err != nil {
		return nil, fmt.Errorf("batched body does not decode: %w", err)
	}
	resp, err := serve(req)
	if err != nil {
		return nil, err
	}
	if resp, err = wire(resp); err != nil {
		return nil, err
	}
	return b.Split(resp)
}

func i32(vs ...int32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}
