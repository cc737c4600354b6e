package doctest

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository's top directory, seen from this package.
const repoRoot = "../.."

// wordsFile is this file: the one place that spells out the words it forbids.
const wordsFile = "internal/doctest/words_test.go"

// workWords match the references to work items and sittings that project files must not make: an
// issue, task, ticket, item or pull request followed by its number, a number after "#" (but not an
// HTML entity, a colour or a URL fragment), an ordinal before the word for a working session, that
// word followed by a number, and the word for a sitting itself; and the journal's phrasings of the
// work item or the sitting: the work item named with "the" or "this" (or in the possessive), and the
// sitting as a span of time or as an actor (its start, earlier in it, in this one, its brief, what it
// measured; TestWorkWords spells them out). A PostgreSQL or HTTP session is none of these: "the
// session holding the horizon", "this session may read", "the session's cookie", "until the end of
// the session" (TestWorkWords lists examples of both).
var workWords = regexp.MustCompile(`(?i)` +
	`\b(issue|task|ticket|item|bug|pr|pull request)s? ?#?[0-9]+\b` +
	`|(^|[^\w&/#])#[0-9]{1,5}\b` +
	`|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth) (work )?(session|sitting)s?\b` +
	`|\b(session|sitting) #?[0-9]+\b` +
	`|\bsittings?\b` +
	// the work item
	`|\b(the|this|that) issue\b|\bissue's\b` +
	// the sitting as a span of time
	`|\b(at|since|from|by) (the|this) session's (start|beginning|outset|end)\b` +
	`|\b(at|since|from) the (start|beginning|outset) of (the|this) session\b` +
	`|\b(in|during|throughout|earlier in|later in|over) (the|this) session *($|[.,;:)])` +
	// the sitting's work, or the sitting as an actor
	`|\b(the|this|that|previous|last|next|earlier) session's (work|brief|goal|plan|notes|findings|measurements|runs|changes|tests|fixes|tasks?)\b` +
	`|\b(the|this) session (found|measured|added|fixed|showed|wrote|made|built|tried|studied|adds|fixes|changed)\b`)

// workWordLines returns the lines of content that workWords matches, as "name:line: text".
func workWordLines(name string, content []byte) []string {
	if bytes.IndexByte(content[:min(len(content), 8000)], 0) >= 0 {
		return nil // a binary file (an image)
	}
	var out []string
	for i, line := range strings.Split(string(content), "\n") {
		if workWords.MatchString(line) {
			out = append(out, fmt.Sprintf("%s:%d: %s", name, i+1, strings.TrimSpace(line)))
		}
	}
	return out
}

// readProjectFile returns the content of f, a file of projectFiles(t, repoRoot), and false if it is
// gone from the work tree (deleted, not yet in the index).
func readProjectFile(t *testing.T, f string) ([]byte, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, f))
	if os.IsNotExist(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// projectFiles lists the repository's files: those git tracks and the new ones it does not ignore,
// else (no git, as in a copy of the tree) every file under root but .git and bin.
func projectFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var files []string
		for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (rel == ".git" || rel == "bin") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// No file of the project names a work item or a sitting: a reader of the code, the docs or the
// changelog needs what is true of the project, not where the work was tracked or when it was done.
func TestNoWorkItemReferences(t *testing.T) {
	var found []string
	for _, f := range projectFiles(t, repoRoot) {
		if f == wordsFile {
			continue
		}
		b, ok := readProjectFile(t, f)
		if !ok {
			continue
		}
		found = append(found, workWordLines(f, b)...)
	}
	if len(found) > 0 {
		t.Fatalf("%d lines name a work item or a sitting (say what is true of the project instead; history "+
			"lives in git and CHANGELOG.md):\n%s", len(found), strings.Join(found, "\n"))
	}
}

func TestWorkWords(t *testing.T) {
	n, sess, iss := "27", "sess"+"ion", "iss"+"ue"
	for _, bad := range []string{
		"issue " + n, "Issue " + n + ":", "(issues " + n + " and 28)", "task #" + n, "see #" + n + ".",
		"fixes #" + n, "PR " + n, "fifth " + sess, "Third " + sess + " of the day", sess + " " + n,
		"in one sitting",
		"(The " + iss + "'s option 2.)", "does not meet the " + iss + "'s requirement", "meets the " + iss + ": no row",
		"this " + iss, "p99 4.2 s at the " + sess + "'s start", "earlier in the " + sess + ", T ran",
		"as measured in this " + sess + ".", "since the start of this " + sess, "the " + sess + "'s brief",
		"The " + sess + " measured 3 runs", "during the " + sess + ")",
	} {
		if !workWords.MatchString(bad) {
			t.Errorf("not caught: %q", bad)
		}
	}
	for _, good := range []string{
		"an idle session", "every session's snapshots", "this session's cookie", "color: #767676;",
		"--fg: #1d2330", "&#39;", "https://example.com/page#2", "issues with the tissue", "a bug in 2 places",
		"migration 00006", "RFC 9457", "item", "sessions 2",
		"an issue with the tissue", "issues", "the session holding the oldest snapshot",
		"Holder is the session, other than the one reading", "the session's backend process id",
		"the session's state", "the session's channel", "whatever ended the session", "ends the session of",
		"closing the session releases the lock", "Whether this session may read and write",
		"send this session's cookie", "the session's CSRF token", "whatever the session's search_path",
		"held until the end of the session", "Eight sessions, one key", "the session it runs on",
	} {
		if workWords.MatchString(good) {
			t.Errorf("caught wrongly: %q", good)
		}
	}
}
