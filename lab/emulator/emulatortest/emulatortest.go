// Package emulatortest starts an emulated Triton for a test, as
// net/http/httptest starts a handler: on loopback, closed when the test
// ends. The end-to-end tests of the load generator, the load reports and
// the proxy share it.
package emulatortest

import (
	"testing"

	"github.com/ratebatch/ratebatch/lab/emulator"
)

// Start serves an emulator with options o on loopback ports (HTTP and
// metrics) until the test ends.
func Start(tb testing.TB, o emulator.Options) *emulator.Server {
	tb.Helper()
	em, err := emulator.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := em.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { em.Close() })
	return em
}
