package kservetest

import "testing"

func TestBatchRows(t *testing.T) {
	tests := []struct {
		body string
		want int
	}{
		{`{"inputs":[{"name":"a","shape":[12,16]}]}`, 12},
		{`{"inputs":[{"name":"a","shape":[3]},{"shape":[9]}]}`, 3},
		{`{"inputs":[]}`, -1},
	}
	for _, tt := range tests {
		if got := BatchRows([]byte(tt.body)); got != tt.want {
			t.Errorf("BatchRows(%s) = %d, want %d", tt.body, got, tt.want)
		}
	}
}
