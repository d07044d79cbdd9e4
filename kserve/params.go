package kserve

import (
	"fmt"
	"maps"
	"strconv"
	"unique"
)

// parameters reads a "parameters" object. When f is non-nil the object
// belongs to a tensor and binary_data_size is taken out into f: it is a
// wire detail, re-derived from Data when encoding. An object of one
// boolean binary_data or binary_data_output, which binary clients send
// with nearly every request and requested output, is a shared map (see
// flagParameters).
func (s *scanner) parameters(f *tensorFields) (Parameters, error) {
	if err := s.openObject(); err != nil {
		return nil, err
	}
	var p Parameters
	var flag Parameters // the object's only member so far, a shared flag
	first := true
	for i := 0; ; i++ {
		key, ok, err := s.nextMember(&first)
		if err != nil {
			return nil, err
		}
		if !ok {
			if flag != nil {
				return flag, nil
			}
			return p, nil
		}
		if i == MaxParameters {
			return nil, fmt.Errorf("more than %d parameters", MaxParameters)
		}
		if f != nil && string(key) == ParamBinaryDataSize {
			text, isInt, err := s.number()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ParamBinaryDataSize, err)
			}
			v, ok := parseInt64(text, isInt)
			if !ok || v < 0 {
				return nil, fmt.Errorf("%s %s is not a non-negative integer", ParamBinaryDataSize, text)
			}
			f.binSize, f.hasBinSize = v, true
			continue
		}
		v, err := s.paramValue()
		if err != nil {
			return nil, fmt.Errorf("parameter %q: %w", key, err)
		}
		if p == nil && flag == nil {
			if b, isBool := v.(bool); isBool {
				if flag = flagParameters(key, b); flag != nil {
					continue
				}
			}
		}
		if p == nil {
			p = make(Parameters, 2)
			maps.Copy(p, flag)
			flag = nil
		}
		p[paramName(key)] = v
	}
}

// The parameter objects that binary clients send with nearly every request
// and requested output, decoded into maps shared by every request that
// sent them (flagParameters) instead of two allocations each. Decoded
// Parameters are therefore read-only: Clone them to change them.
var (
	binaryDataTrue        = Parameters{ParamBinaryData: true}
	binaryDataFalse       = Parameters{ParamBinaryData: false}
	binaryDataOutputTrue  = Parameters{ParamBinaryDataOutput: true}
	binaryDataOutputFalse = Parameters{ParamBinaryDataOutput: false}
)

// flagParameters is the shared map of the one-member object {key: v}, or
// nil when key is not one of the flags shared.
func flagParameters(key []byte, v bool) Parameters {
	switch string(key) {
	case ParamBinaryData:
		if v {
			return binaryDataTrue
		}
		return binaryDataFalse
	case ParamBinaryDataOutput:
		if v {
			return binaryDataOutputTrue
		}
		return binaryDataOutputFalse
	}
	return nil
}

// intern is b as a string, interned (package unique). It is for the tensor
// names and batch keys that every request and answer of a model repeat: each
// is then allocated once, not once per request.
func intern(b []byte) string { return unique.Make(string(b)).Value() }

// paramName is key as a string, without allocating one for the names a
// client sends with every request (binary_data_output with every binary
// request, for one).
func paramName(key []byte) string {
	switch string(key) { // a switch on string([]byte) does not allocate
	case ParamBinaryData:
		return ParamBinaryData
	case ParamBinaryDataOutput:
		return ParamBinaryDataOutput
	case ParamClassification:
		return ParamClassification
	case ParamTimeout:
		return ParamTimeout
	case ParamPriority:
		return ParamPriority
	case ParamSequenceID:
		return ParamSequenceID
	case ParamSequenceStart:
		return ParamSequenceStart
	case ParamSequenceEnd:
		return ParamSequenceEnd
	}
	return string(key)
}

// paramValue reads one parameter value (see Parameters for the Go types).
func (s *scanner) paramValue() (any, error) {
	switch c := s.peek(); c {
	case '"':
		b, err := s.str()
		return string(b), err
	case 't', 'f':
		return s.boolean()
	case '{', '[', 'n':
		b, err := s.skip()
		return RawJSON(b), err
	default:
		text, isInt, err := s.number()
		if err != nil {
			return nil, err
		}
		if isInt {
			if v, ok := parseInt64(text, true); ok {
				return v, nil
			}
			if text[0] != '-' {
				if u, ok := parseUint(text); ok {
					return u, nil
				}
			}
		}
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s is out of range", text)
		}
		return f, nil
	}
}
