package loadreport

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ratebatch/ratebatch/lab/loadgen"
)

// DirSpecs are the run specs (NAME=LOAD.csv[,SAMPLES.csv], as ReadRun
// reads them) of the runs names in dir, as `ratebatch demo` leaves them:
// NAME.load.csv and NAME.samples.csv. With no names, every NAME.load.csv
// found there, those named in first leading in first's order (so that the
// demo's first policy stays the baseline), then the others by name; a
// found run's samples are read only when they exist.
func DirSpecs(dir string, names []string, first []string) ([]string, error) {
	given := len(names) > 0
	if !given {
		found, err := runsIn(dir, first)
		if err != nil {
			return nil, err
		}
		names = found
	}
	var specs []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		spec := fmt.Sprintf("%s=%s", n, filepath.Join(dir, n+".load.csv"))
		// The samples are optional: a plain load run has none.
		if samples := filepath.Join(dir, n+".samples.csv"); given || exists(samples) {
			spec += "," + samples
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// runsIn lists the runs dir holds (NAME.load.csv), those in first leading.
func runsIn(dir string, first []string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.load.csv"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("--dir %s: no NAME.load.csv files (as 'ratebatch demo' or 'ratebatch load --csv' write them)", dir)
	}
	rank := func(n string) int {
		if i := slices.Index(first, n); i >= 0 {
			return i
		}
		return len(first)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = strings.TrimSuffix(filepath.Base(p), ".load.csv")
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return names, nil
}

// ReadRun reads the run spec NAME=LOAD.csv[,SAMPLES.csv]: the CSV of
// `ratebatch load --csv` and, optionally, the samples of --samples-csv.
func ReadRun(spec string) (Run, error) {
	name, files, ok := strings.Cut(spec, "=")
	if !ok || name == "" || files == "" {
		return Run{}, fmt.Errorf("--run %q: want NAME=LOAD.csv[,SAMPLES.csv]", spec)
	}
	loadPath, samplesPath, _ := strings.Cut(files, ",")
	r := Run{Name: name}
	f, err := os.Open(loadPath)
	if err != nil {
		return r, fmt.Errorf("run %s: %w", name, err)
	}
	r.Records, err = loadgen.ReadCSV(f)
	f.Close()
	if err != nil {
		return r, fmt.Errorf("run %s: %s: %w", name, loadPath, err)
	}
	if samplesPath != "" {
		f, err := os.Open(samplesPath)
		if err != nil {
			return r, fmt.Errorf("run %s: %w", name, err)
		}
		r.Samples, err = ReadSamplesCSV(f)
		f.Close()
		if err != nil {
			return r, fmt.Errorf("run %s: %s: %w", name, samplesPath, err)
		}
	}
	return r, nil
}

// WriteDir writes dir/summary.md (the table of rows) and the plots of
// runs into dir, creating it, and returns the plots' paths.
func WriteDir(dir string, rows []Row, runs []Run) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "summary.md"))
	if err != nil {
		return nil, err
	}
	if err := WriteTable(f, rows); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return WritePlots(dir, runs)
}

// Report reads the runs specs name (ReadRun), writes their table and plots
// into out (WriteDir), and prints the table and what it wrote, or with
// asJSON the rows and the plots' paths.
func Report(specs []string, out string, stdout io.Writer, asJSON bool) error {
	var loaded []Run
	for _, spec := range specs {
		r, err := ReadRun(spec)
		if err != nil {
			return err
		}
		loaded = append(loaded, r)
	}
	rows := Summarize(loaded)
	paths, err := WriteDir(out, rows, loaded)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Rows  []Row    `json:"rows"`
			Plots []string `json:"plots"`
		}{rows, paths})
	}
	WriteTable(stdout, rows)
	fmt.Fprintf(stdout, "\nwrote %s/summary.md and:\n", out)
	for _, p := range paths {
		fmt.Fprintln(stdout, "  "+p)
	}
	return nil
}
