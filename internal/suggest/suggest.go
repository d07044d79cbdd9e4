// Package suggest finds the name someone meant: the did-you-mean of the
// command line's unknown commands and flags and of the configuration
// file's unknown keys, one rule for all of them.
package suggest

import "strings"

// Closest returns the name among names nearest to a mistyped one (edit
// distance at most 2, or the only name it is a prefix of), or "".
func Closest(name string, names []string) string {
	best, bestD := "", 3
	var prefixed []string
	for _, n := range names {
		if strings.HasPrefix(n, name) {
			prefixed = append(prefixed, n)
		}
		if d := Distance(name, n); d < bestD || (d == bestD && n < best) {
			best, bestD = n, d
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// Distance is the Levenshtein distance between a and b: the insertions,
// deletions and substitutions of bytes that turn one into the other.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
