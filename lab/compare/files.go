package compare

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteFiles writes the report's SVG plots into plotsDir (none when empty)
// and its Markdown to out (none when empty), linking the plots by their
// path relative to out's directory; command is the command line the report
// names as its source, quoted so that it can be pasted into a shell. A kept section of an existing report at out survives
// (between KeptBegin and KeptEnd). It returns the plots' file names.
func (r *Report) WriteFiles(out, plotsDir string, command []string) ([]string, error) {
	imgRel := ""
	var written []string
	if plotsDir != "" {
		if err := os.MkdirAll(plotsDir, 0o755); err != nil {
			return nil, fmt.Errorf("creating the plots directory: %w", err)
		}
		for _, f := range r.Figures() {
			if err := writeFigure(filepath.Join(plotsDir, f.File), f); err != nil {
				return written, err
			}
			written = append(written, f.File)
		}
		imgRel = plotsDir
		if out != "" {
			if rel, err := filepath.Rel(filepath.Dir(out), plotsDir); err == nil {
				imgRel = rel
			}
		}
		imgRel = filepath.ToSlash(imgRel)
	}
	if out != "" {
		if err := writeReport(out, r, ShellJoin(command), imgRel); err != nil {
			return written, err
		}
	}
	return written, nil
}

func writeFigure(path string, f Figure) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing plot %s: %w", f.File, err)
	}
	if err := f.Figure.WriteSVG(file); err != nil {
		file.Close()
		return fmt.Errorf("writing plot %s: %w", f.File, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("writing plot %s: %w", f.File, err)
	}
	return nil
}

func writeReport(path string, rep *Report, command, imgRel string) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	kept, err := keptSection(path)
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := rep.WriteMarkdown(f, command, imgRel); err != nil {
		f.Close()
		return fmt.Errorf("writing the report: %w", err)
	}
	if kept != "" {
		if _, err := io.WriteString(f, "\n"+kept+"\n"); err != nil {
			f.Close()
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// The report keeps, across regenerations, the one part of it that compare
// does not make: figures of live runs (other commands, each named in the
// section), between these two lines.
const (
	KeptBegin = "<!-- kept by ratebatch compare: BEGIN -->"
	KeptEnd   = "<!-- kept by ratebatch compare: END -->"
)

// keptSection returns the kept part of the report at path, markers
// included, or "" when the file or the part does not exist.
func keptSection(path string) (string, error) {
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(old), KeptBegin)
	if !ok {
		return "", nil
	}
	body, _, ok := strings.Cut(rest, KeptEnd)
	if !ok {
		return "", fmt.Errorf("%s has %q without %q", path, KeptBegin, KeptEnd)
	}
	return KeptBegin + body + KeptEnd, nil
}

// ShellJoin quotes args so that the printed command line can be pasted
// back into a shell.
func ShellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == ',' || r == '/' || r == '=' || r == '+' || r == ':' ||
				r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
