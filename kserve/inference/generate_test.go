package inference

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the Go code from inference.proto
// into a temporary directory and fails when the committed files differ:
// an edit of the .proto without `make generate` would otherwise ship code
// that disagrees with the contract it claims to implement.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	// Where scripts/setup-proto.sh puts the plugins, then the PATH.
	tools, err := filepath.Abs(filepath.Join("..", "..", "bin", "tools"))
	if err != nil {
		t.Fatal(err)
	}
	path := tools + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, tool := range []string{"protoc", "protoc-gen-go", "protoc-gen-go-grpc"} {
		if _, err := lookPath(tool, path); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed; CI must run scripts/setup-proto.sh (make test does)", tool)
			}
			t.Skipf("%s is not installed: run scripts/setup-proto.sh (or make generate) to check the generated code", tool)
		}
	}
	// Read here so that go test's cache sees an edit of the .proto.
	if _, err := os.ReadFile("inference.proto"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("protoc", "-I.", "--go_out="+dir, "--go_opt=paths=source_relative",
		"--go-grpc_out="+dir, "--go-grpc_opt=paths=source_relative", "inference.proto")
	cmd.Env = append(os.Environ(), "PATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	for _, name := range []string{"inference.pb.go", "inference_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(withoutVersions(have), withoutVersions(want)) {
			t.Errorf("%s is stale: run `make generate` and commit the result", name)
		}
	}
}

// withoutVersions drops the header lines naming the tool versions, so that
// another protoc release with the same output does not count as a change.
func withoutVersions(src []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(src, []byte("\n")) {
		s := string(line)
		if strings.HasPrefix(s, "// \tprotoc") || strings.HasPrefix(s, "// - protoc") {
			continue
		}
		out = append(out, line)
	}
	return bytes.Join(out, []byte("\n"))
}

func lookPath(name, path string) (string, error) {
	old := os.Getenv("PATH")
	os.Setenv("PATH", path)
	defer os.Setenv("PATH", old)
	return exec.LookPath(name)
}
