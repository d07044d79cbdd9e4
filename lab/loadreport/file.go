package loadreport

import (
	"fmt"
	"io"
	"os"
)

// WriteFile creates path and fills it with fn, naming the file in a
// write error: the load runs', reports' and profiles' files are written so.
func WriteFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
