package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Bytes is a size in bytes that reads and prints with binary units (64MiB).
type Bytes int64

var units = []struct {
	suffix string
	mult   int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseBytes reads "1048576", "512KiB", "64MiB", "1GB".
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || (n > 0 && mult > (1<<62)/n) {
		return 0, fmt.Errorf("wants a size (e.g. 65536, 512KiB, 64MiB), got %q", s)
	}
	return Bytes(n * mult), nil
}

func (b Bytes) String() string {
	for _, u := range units[:3] {
		if b >= Bytes(u.mult) && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalYAML accepts both 67108864 and "64MiB".
func (b *Bytes) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err != nil {
		return err
	}
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}
