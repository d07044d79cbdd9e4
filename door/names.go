package door

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratebatch/ratebatch/kserve"
)

// A call names a model and a version, and both end up in the path of the
// request the dispatcher sends upstream and in the queue, fit and failure
// detector the call is counted against. Each is checked where it enters,
// at either door, before it is looked up, queued or sent: a name that
// could not be a model's, or a version that is not a number, reaches no
// queue and no path, and its caller gets Triton's own answer to it.

// maxModelName is the longest name a directory entry can have (NAME_MAX).
const maxModelName = 255

// CheckModel reports whether name can name a model of Triton's model
// repository, which is a directory's name: not empty, at most 255 bytes,
// no '/' and no NUL, and neither "." nor "..". No model has any other
// name, so a call naming one is answered as Triton answers an unknown
// model (NoModel), before anything is looked up.
func CheckModel(name string) bool {
	return name != "" && len(name) <= maxModelName && name != "." && name != ".." &&
		!strings.ContainsAny(name, "/\x00")
}

// NoModel is Triton's answer to a call naming a model it does not
// serve: 404 (NOT_FOUND over gRPC), naming it as the caller wrote it
// (over HTTP, the path's segment as sent: Triton does not decode it).
func NoModel(name string) error {
	return &kserve.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("Request for unknown model: '%s' is not found", name)}
}

// NoRoute is Triton's HTTP answer to a path none of its routes matches,
// which an inference path whose version is not digits is (PathVersion).
var NoRoute = &kserve.Error{Status: http.StatusNotFound, Msg: "Not Found"}

// PathVersion reports whether raw, the version segment of an HTTP
// inference path as sent, is one Triton's route takes: decimal digits
// only (Triton matches the path, undecoded, against /versions/([0-9]+)).
// Any other path is not an inference path to Triton, and gets NoRoute.
func PathVersion(raw string) bool {
	if raw == "" {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return false
		}
	}
	return true
}

// Version reads a call's model version as Triton reads it (std::stol):
// "" is the model's default version; otherwise optional leading white
// space, an optional sign and decimal digits, whatever follows them
// ignored ("1abc" and " 1" are version 1), the number at least 0 and
// within int64. It returns the version in decimal ("007" is "7"), the
// form that goes into the batch key and the upstream path, which then
// holds nothing but digits. Anything else is refused as Triton refuses
// it: 400, INVALID_ARGUMENT, in its words.
func Version(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == digits {
		return "", badVersion(s)
	}
	v, err := strconv.ParseInt(s[start:i], 10, 64)
	if err != nil { // out of range
		return "", badVersion(s)
	}
	if v < 0 {
		return "", &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf(
			"invalid model version specified '%s' , version should be an integral value > 0", s)}
	}
	return strconv.FormatInt(v, 10), nil
}

func badVersion(s string) error {
	return &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf(
		"failed to get model version from specified version string '%s' (details: stol), version should be an integral value > 0", s)}
}

// isSpace is C's isspace in the C locale, which std::stol skips.
func isSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }
