package bench

import (
	"os"
	"strings"
)

// reportHeader starts a report file that does not exist yet.
const reportHeader = `# txinbox benchmarks

The sections between txbench markers are written by the benchmark commands: each run replaces the
sections of the benchmarks it ran and keeps the others.

`

// WriteSection replaces the section named name of the Markdown file at path with md: the text
// between the lines <!-- txbench:NAME:begin --> and <!-- txbench:NAME:end -->, markers kept. A
// section not in the file yet is appended to it; a file that does not exist is created.
func WriteSection(path, name, md string) error {
	begin, end := "<!-- txbench:"+name+":begin -->", "<!-- txbench:"+name+":end -->"
	block := begin + "\n" + md + end + "\n"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	if s == "" {
		s = reportHeader
	}
	if i := strings.Index(s, begin); i >= 0 {
		if j := strings.Index(s[i:], end); j >= 0 {
			tail := strings.TrimPrefix(s[i+j+len(end):], "\n")
			return os.WriteFile(path, []byte(s[:i]+block+tail), 0o644)
		}
	}
	if !strings.HasSuffix(s, "\n\n") {
		s = strings.TrimRight(s, "\n") + "\n\n"
	}
	return os.WriteFile(path, []byte(s+block), 0o644)
}
