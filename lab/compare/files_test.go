package compare

import "testing"

func TestShellJoin(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--rhos", "0.1,0.5", "--out", "my file.md", "--w2", "it's"}, `--rhos 0.1,0.5 --out 'my file.md' --w2 'it'\''s'`},
		{[]string{"ratebatch", "compare", "--trace", ""}, `ratebatch compare --trace ''`},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := ShellJoin(tt.args); got != tt.want {
			t.Errorf("ShellJoin(%q) = %s, want %s", tt.args, got, tt.want)
		}
	}
}
