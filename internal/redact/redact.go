// Package redact masks the secrets a URL may carry, so that a URL from the
// configuration can be shown (the admin port's /status, the log, an error)
// without them: an operator configures a Triton behind basic auth, an OTLP
// receiver or a metrics endpoint that takes a token, and the URL is then a
// credential.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces a secret.
const Mask = "REDACTED"

// secretParams are the parts of query parameter names that mark their
// value as a secret: token, access_token, api_key, key, password,
// client_secret, signature, sig, auth, X-Amz-Credential, session ids.
var secretParams = []string{"token", "key", "pass", "secret", "sig", "auth", "cred", "session"}

// URL returns raw with its user information (user and password alike: a
// user name alone is often a token) and the values of query parameters
// whose names say they are secrets replaced by Mask. A string that does not
// parse as a URL is masked whole when it could hold either, else returned
// as it is.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if strings.ContainsAny(raw, "@?") {
			return Mask
		}
		return raw
	}
	q := query(u.RawQuery)
	if u.User == nil && q == u.RawQuery {
		return raw // nothing to mask: as written
	}
	if u.User != nil {
		u.User = url.User(Mask)
	}
	u.RawQuery = q
	return u.String()
}

// query masks the secret values of a raw query, keeping its order and
// the spelling of everything else.
func query(raw string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if !hasValue {
			continue
		}
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if secret(name) {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + Mask
		}
	}
	return strings.Join(parts, "&")
}

func secret(name string) bool {
	name = strings.ToLower(name)
	for _, s := range secretParams {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
