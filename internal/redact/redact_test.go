package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:8000", "http://127.0.0.1:8000"},
		{"http://triton:8000/base", "http://triton:8000/base"},
		{"http://user:s3cret@triton:8000", "http://REDACTED@triton:8000"},
		{"https://tok123@otel.example:4318", "https://REDACTED@otel.example:4318"},
		{"http://triton:8002/metrics?token=s3cret", "http://triton:8002/metrics?token=REDACTED"},
		{"http://h/m?a=1&api_key=s3cret&b=2&Password=s3cret&X-Amz-Signature=s3cret&X-Amz-Credential=s3cret",
			"http://h/m?a=1&api_key=REDACTED&b=2&Password=REDACTED&X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED"},
		{"http://h/m?access%5Ftoken=s3cret&flag", "http://h/m?access%5Ftoken=REDACTED&flag"},
		{"http://h/m?format=text", "http://h/m?format=text"},
		{"", ""},
		{"http://u:s3cret@h:bad port", Mask},
		{"not a url at all", "not a url at all"},
	} {
		got := URL(tc.in)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(got, "tok123") {
			t.Errorf("URL(%q) = %q keeps the secret", tc.in, got)
		}
	}
}
