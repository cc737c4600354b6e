package doctest

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// linkDocs are the documents whose links are checked: the Markdown files at the repository's root
// and in docs/.
func linkDocs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"*.md", "docs/*.md"} {
		docs, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			rel, _ := filepath.Rel(repoRoot, d)
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out
}

var (
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	mdLink     = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`) // a link in a heading: its text counts
)

// proseLines returns the lines of a Markdown document outside its fenced blocks, by line number
// (from 1).
func proseLines(md string) map[int]string {
	out := map[int]string{}
	fence := ""
	for i, l := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(l, " \t")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "`~") == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`~"))]
			continue
		}
		out[i+1] = l
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of a Markdown document: the heading's text
// in lower case, without what is neither a letter, a digit, a space, '-' nor '_', spaces made '-';
// a repeated one gets "-1", "-2", ... appended.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := proseLines(md)
	for n := 1; n <= strings.Count(md, "\n")+1; n++ {
		m := mdHeading.FindStringSubmatch(strings.ReplaceAll(lines[n], "`", "")) // a code span's text counts
		if m == nil {
			continue
		}
		text := linkText.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			out[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Every relative link of the Markdown files at the root and in docs/ leads somewhere: to a file or
// directory of the repository and, for a link with a fragment into a Markdown file, to one of its
// headings.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	var broken []string
	for _, doc := range linkDocs(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for n, l := range proseLines(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				dest := doc
				if file != "" {
					dest = path.Join(path.Dir(doc), file)
				}
				content, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(dest)))
				if err != nil {
					if info, serr := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(dest))); serr == nil && info.IsDir() && frag == "" {
						continue
					}
					broken = append(broken, fmt.Sprintf("%s:%d: %s: no file %s", doc, n, target, dest))
					continue
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(string(content))[frag] {
					broken = append(broken, fmt.Sprintf("%s:%d: %s: no heading #%s in %s", doc, n, target, frag, dest))
				}
			}
		}
	}
	if len(broken) > 0 {
		t.Fatalf("%d links lead nowhere:\n%s", len(broken), strings.Join(broken, "\n"))
	}
}

func TestAnchors(t *testing.T) {
	md := "# Scaling txinbox\n## HTTP: the `Idempotency-Key` middleware\n```\n# not a heading\n```\n" +
		"### The acceptance run: make citus\n## Notes\n## Notes\n## Receive, ReceiveTx, ReceiveMany\n"
	got := anchors(md)
	for _, want := range []string{"scaling-txinbox", "http-the-idempotency-key-middleware",
		"the-acceptance-run-make-citus", "notes", "notes-1", "receive-receivetx-receivemany"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a line of a fenced block made an anchor")
	}
}
