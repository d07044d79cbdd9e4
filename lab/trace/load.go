package trace

import (
	"fmt"
	"os"
	"strings"
)

// Load resolves a built-in trace name, or reads a CSV file when the name is
// not built in and ends in .csv: what every command's --trace accepts.
func Load(name string) (*Series, error) {
	if !strings.HasSuffix(strings.ToLower(name), ".csv") {
		return Lookup(name)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading the trace: %w", err)
	}
	defer f.Close()
	return ReadCSV(f, name)
}
