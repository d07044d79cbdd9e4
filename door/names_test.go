package door

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// The names a model can have are a repository directory's: every name
// that would put another segment (or none) into the upstream path is
// refused, every other is not.
func TestCheckModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"simple", true},
		{"resnet50_v1.5-int8", true},
		{"a b", true},       // a directory may hold a space; the path escapes it
		{"%2E%2E", true},    // as sent over HTTP undecoded, a name like any other
		{"...", true},       // not a dot segment
		{"model~1+x", true}, // no character but '/' and NUL is special to a directory
		{"", false},
		{".", false},
		{"..", false},
		{"../image", false},
		{"simple/../image", false},
		{"a\x00b", false},
		{strings.Repeat("m", 255), true},
		{strings.Repeat("m", 256), false},
	} {
		if got := CheckModel(tc.name); got != tc.ok {
			t.Errorf("CheckModel(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// Versions read as Triton's std::stol reads them: answered by the real
// server (tritonserver 2.51, model simple of version 1) over gRPC, where
// the version is a free string: "1abc" and " 1" reached version 1, "7"
// was an unknown version (so a number, passed on), and the rest were
// refused with the messages below.
func TestVersion(t *testing.T) {
	const stol = "failed to get model version from specified version string '%s' (details: stol), version should be an integral value > 0"
	for _, tc := range []struct {
		in, want string
		msg      string // the refusal's message (%s: in), "" when accepted
	}{
		{"", "", ""},
		{"1", "1", ""},
		{"007", "7", ""},
		{"1abc", "1", ""},
		{" 1", "1", ""},
		{"\t+3", "3", ""},
		{"0", "0", ""},
		{"-0", "0", ""},
		{"9223372036854775807", "9223372036854775807", ""},
		{"../../image", "", stol},
		{"..%2F..%2Fimage", "", stol},
		{"abc", "", stol},
		{"-", "", stol},
		{" ", "", stol},
		{"99999999999999999999", "", stol},
		{"-1", "", "invalid model version specified '%s' , version should be an integral value > 0"},
	} {
		got, err := Version(tc.in)
		switch {
		case tc.msg == "" && (err != nil || got != tc.want):
			t.Errorf("Version(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.msg != "" && err == nil:
			t.Errorf("Version(%q) = %q, want a refusal", tc.in, got)
		case tc.msg != "":
			want := strings.Replace(tc.msg, "%s", tc.in, 1)
			if StatusCode(err) != 400 || GRPCStatus(err).Code() != codes.InvalidArgument || err.Error() != want {
				t.Errorf("Version(%q): %d %v %q, want 400 INVALID_ARGUMENT %q", tc.in, StatusCode(err), GRPCStatus(err).Code(), err, want)
			}
		}
	}
}

// An HTTP path's version is Triton's route's: digits only, undecoded.
func TestPathVersion(t *testing.T) {
	for in, want := range map[string]bool{
		"1": true, "007": true, "18446744073709551616": true,
		"": false, "1a": false, "%31": false, "..%2F..%2Fimage": false, "..": false, "+1": false, " 1": false,
	} {
		if got := PathVersion(in); got != want {
			t.Errorf("PathVersion(%q) = %v, want %v", in, got, want)
		}
	}
}

// The answers to a name no model has and a path no route takes are
// Triton's, word for word (tritonserver 2.51 over HTTP and gRPC).
func TestNoModelNoRoute(t *testing.T) {
	err := NoModel("..%2Fx")
	if StatusCode(err) != 404 || GRPCStatus(err).Code() != codes.NotFound || err.Error() != "Request for unknown model: '..%2Fx' is not found" {
		t.Errorf("NoModel: %d %v %q", StatusCode(err), GRPCStatus(err).Code(), err)
	}
	if StatusCode(NoRoute) != 404 || NoRoute.Error() != "Not Found" {
		t.Errorf("NoRoute: %d %q", StatusCode(NoRoute), NoRoute)
	}
}
