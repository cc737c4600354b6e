package chaintest

import (
	"strings"
	"testing"
)

// TestCheckSequence checks the verdicts of the final verification on one key: nothing for 1..PerKey
// in order, and each kind of fault named.
func TestCheckSequence(t *testing.T) {
	t.Parallel()
	seq := func(edit func([]int) []int) []int {
		s := make([]int, PerKey)
		for i := range s {
			s[i] = i + 1
		}
		return edit(s)
	}
	for _, tc := range []struct {
		name string
		seqs []int
		want []string // parts of the verdict; none: no fault
	}{
		{"in order", seq(func(s []int) []int { return s }), nil},
		{"missing", seq(func(s []int) []int { return append(s[:4], s[5:]...) }), []string{"missing [5]"}},
		{"twice", seq(func(s []int) []int { return append(s, PerKey) }), []string{"applied more than once [30]"}},
		{"swapped", seq(func(s []int) []int { s[6], s[7] = s[7], s[6]; return s }), []string{"out of order: 7 applied after 8"}},
		{"unknown", seq(func(s []int) []int { return append(s, PerKey+1) }), []string{"unknown number 31"}},
		{"none", nil, []string{"missing [1 2 3"}},
	} {
		got := checkSequence("k00", tc.seqs)
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: %q, want no fault", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) || !strings.HasPrefix(got, "key k00: ") {
				t.Errorf("%s: %q, want it to name %q", tc.name, got, w)
			}
		}
	}
}
