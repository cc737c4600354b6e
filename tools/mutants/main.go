// Command mutants checks that every guarantee of txinbox is needed by a test: it applies each mutation
// of a curated list (mutants.txt) to a temporary copy of the repository, runs only the tests that guard
// it, and fails unless every mutant is killed (a guarding test fails). See README.md.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// edit replaces the one occurrence of Search in File by Replace.
type edit struct {
	File, Search, Replace string
}

// guard is a package and a -run regexp of the tests that must kill a mutant.
type guard struct {
	Pkg, Run string
}

// mutant is one mutation of a guarantee.
type mutant struct {
	Name, Guarantee string
	Line            int // of its "mutant:" line in the list
	Tests           []guard
	Edits           []edit
}

// result is what running a mutant gave.
type result struct {
	Status string // KILLED, SURVIVED or ERROR
	Detail string // the failed tests, or why it is an error
	Output string // what the failed tests printed (shown with -v)
	Took   time.Duration
}

func main() {
	root := flag.String("root", "", "repository to mutate (default: the git work tree containing the current directory)")
	list := flag.String("list", "", "mutant list (default: <root>/tools/mutants/mutants.txt)")
	sqlc := flag.String("sqlc", "", "sqlc binary, run when a mutant changes queries/ or migrations/ (default: <root>/bin/sqlc)")
	only := flag.String("run", "", "run only the mutants whose name matches this regexp")
	race := flag.Bool("race", false, "run the tests with -race")
	timeout := flag.Duration("timeout", 4*time.Minute, "go test -timeout of each run")
	baseline := flag.Bool("baseline", true, "first run the guarding tests on the unmutated copy (they must pass)")
	keep := flag.Bool("keep", false, "keep the temporary copies")
	verbose := flag.Bool("v", false, "print what the tests that killed each mutant printed (their last 25 lines each)")
	jobs := flag.Int("j", 1, "mutants run at once, each in a copy of its own (the tests of each use schemas of their own)")
	flag.Parse()
	if err := run(*root, *list, *sqlc, *only, *race, *timeout, *baseline, *keep, *verbose, max(*jobs, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(root, list, sqlc, only string, race bool, timeout time.Duration, baseline, keep, verbose bool, jobs int) error {
	start := time.Now()
	if root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("finding the repository: %v", err)
		}
		root = strings.TrimSpace(string(out))
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if list == "" {
		list = filepath.Join(root, "tools", "mutants", "mutants.txt")
	}
	if sqlc == "" {
		sqlc = filepath.Join(root, "bin", "sqlc")
	}
	if sqlc, err = filepath.Abs(sqlc); err != nil {
		return err
	}
	text, err := os.ReadFile(list)
	if err != nil {
		return err
	}
	mutants, err := parse(string(text))
	if err != nil {
		return fmt.Errorf("%s: %v", list, err)
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return fmt.Errorf("-run: %v", err)
		}
		var keep []mutant
		for _, m := range mutants {
			if re.MatchString(m.Name) {
				keep = append(keep, m)
			}
		}
		mutants = keep
	}
	if len(mutants) == 0 {
		return errors.New("no mutant to run")
	}

	jobs = min(jobs, len(mutants))
	var dirs []string
	if !keep {
		defer func() {
			for _, d := range dirs {
				os.RemoveAll(d)
			}
		}()
		// Interrupted (the go test children get the signal too): remove the copies all the same.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		go func() {
			<-sig
			for _, d := range dirs {
				os.RemoveAll(d)
			}
			os.Exit(2)
		}()
	}
	for range jobs {
		dir, err := os.MkdirTemp("", "txinbox-mutants-")
		if err != nil {
			return err
		}
		dirs = append(dirs, dir)
		files, err := copyRepo(root, dir)
		if err != nil {
			return err
		}
		// The generated code as copied, to put back after a mutant of queries/ or migrations/ (not
		// from root: its work tree may change during the run).
		if err := restoreDir(dir, filepath.Join(dir, pristine), sqlcDir); err != nil {
			return err
		}
		fmt.Printf("copied %d files of %s to %s\n", len(files), root, dir)
		if keep {
			fmt.Printf("copy kept in %s\n", dir)
		}
	}

	if baseline {
		fmt.Println("baseline: the guarding tests on the unmutated copy")
		if failed, err := baselineRun(dirs, mutants, race, timeout); err != nil {
			return fmt.Errorf("baseline: %v", err)
		} else if len(failed) > 0 {
			return fmt.Errorf("baseline: tests fail without any mutation, so no mutant can be judged: %s", strings.Join(failed, ", "))
		}
	}

	// Each job takes the next mutant and runs it in its own copy; a line is printed as each ends.
	results := make([]result, len(mutants))
	next := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := 0
	for _, dir := range dirs {
		wg.Go(func() {
			for i := range next {
				t := time.Now()
				r := runMutant(dir, root, sqlc, mutants[i], race, timeout)
				r.Took = time.Since(t).Round(time.Second)
				mu.Lock()
				results[i] = r
				done++
				fmt.Printf("[%d/%d] %s: %s (%v) %s\n", done, len(mutants), mutants[i].Name, r.Status, r.Took, r.Detail)
				if verbose && r.Output != "" {
					fmt.Print(indent(r.Output, "    | "))
				}
				mu.Unlock()
			}
		})
	}
	for i := range mutants {
		next <- i
	}
	close(next)
	wg.Wait()

	fmt.Printf("\n%-24s %-9s %6s  %s\n", "MUTANT", "RESULT", "TIME", "FAILED TESTS / ERROR")
	bad := 0
	for i, m := range mutants {
		r := results[i]
		fmt.Printf("%-24s %-9s %6v  %s\n", m.Name, r.Status, r.Took, r.Detail)
		fmt.Printf("%-24s breaks: %s\n", "", m.Guarantee)
		if r.Status != "KILLED" {
			bad++
		}
	}
	fmt.Printf("\n%d mutants, %d killed, %d survived or in error; total %v\n", len(mutants), len(mutants)-bad, bad,
		time.Since(start).Round(time.Second))
	if bad > 0 {
		return fmt.Errorf("%d mutants not killed", bad)
	}
	return nil
}

// parse reads a mutant list (format: README.md).
func parse(text string) ([]mutant, error) {
	var out []mutant
	var cur *mutant
	file := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		n := i + 1
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if trimmed == "<<<<" {
			if cur == nil || file == "" {
				return nil, fmt.Errorf("line %d: an edit needs a mutant and a file before it", n)
			}
			var search, replace []string
			in := &search
			closed := false
			for i++; i < len(lines); i++ {
				switch lines[i] {
				case "====":
					if in == &replace {
						return nil, fmt.Errorf("line %d: second ====", i+1)
					}
					in = &replace
					continue
				case ">>>>":
					closed = true
				}
				if closed {
					break
				}
				*in = append(*in, lines[i])
			}
			if !closed || in != &replace {
				return nil, fmt.Errorf("line %d: edit not closed by ==== and >>>>", n)
			}
			e := edit{File: file, Search: strings.Join(search, "\n"), Replace: strings.Join(replace, "\n")}
			if e.Search == "" || e.Search == e.Replace {
				return nil, fmt.Errorf("line %d: an edit must change a non-empty text", n)
			}
			cur.Edits = append(cur.Edits, e)
			continue
		}
		key, val, ok := strings.Cut(trimmed, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: want key: value, <<<<, a comment or a blank line", n)
		}
		val = strings.TrimSpace(val)
		if key != "mutant" && cur == nil {
			return nil, fmt.Errorf("line %d: %s before the first mutant", n, key)
		}
		switch key {
		case "mutant":
			if val == "" {
				return nil, fmt.Errorf("line %d: empty mutant name", n)
			}
			for _, m := range out {
				if m.Name == val {
					return nil, fmt.Errorf("line %d: mutant %s listed twice", n, val)
				}
			}
			out = append(out, mutant{Name: val, Line: n})
			cur, file = &out[len(out)-1], ""
		case "breaks":
			cur.Guarantee = val
		case "test":
			pkg, re, ok := strings.Cut(val, " ")
			if !ok || strings.TrimSpace(re) == "" || !strings.HasPrefix(pkg, "./") {
				return nil, fmt.Errorf("line %d: want test: ./package TestRegexp", n)
			}
			if _, err := regexp.Compile(strings.TrimSpace(re)); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			cur.Tests = append(cur.Tests, guard{Pkg: pkg, Run: strings.TrimSpace(re)})
		case "file":
			file = filepath.FromSlash(val)
		default:
			return nil, fmt.Errorf("line %d: unknown key %q", n, key)
		}
	}
	for _, m := range out {
		if m.Guarantee == "" || len(m.Tests) == 0 || len(m.Edits) == 0 {
			return nil, fmt.Errorf("mutant %s (line %d): needs breaks:, test: and at least one edit", m.Name, m.Line)
		}
	}
	return out, nil
}

// copyRepo copies the files git knows of (tracked, and untracked but not ignored), as they are in the
// work tree, from root to dir.
func copyRepo(root, dir string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		src, dst := filepath.Join(root, f), filepath.Join(dir, f)
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree
		} else if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(target, dst); err != nil {
				return nil, err
			}
		} else if fi.Mode().IsRegular() {
			if err := copyFile(src, dst, fi.Mode().Perm()); err != nil {
				return nil, err
			}
		} else {
			continue
		}
		files = append(files, f)
	}
	return files, nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// baselineRun runs, per package, every guarding test of the mutants on the unmutated copies (the
// packages shared among them, one package per copy at a time) and returns those that failed. A
// package's -run patterns are joined with a bare |, which go test splits on (outside parentheses
// and brackets) into alternatives, each matched level by level: a pattern that selects subtests
// (TestConformance/^Deliver$) keeps its meaning, as it would not inside a group.
func baselineRun(dirs []string, mutants []mutant, race bool, timeout time.Duration) ([]string, error) {
	byPkg := map[string][]string{}
	for _, m := range mutants {
		for _, g := range m.Tests {
			byPkg[g.Pkg] = append(byPkg[g.Pkg], g.Run)
		}
	}
	pkgs := make([]string, 0, len(byPkg))
	for p := range byPkg {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		failed []string
		errs   []error
		next   = make(chan string)
	)
	for _, dir := range dirs {
		wg.Go(func() {
			for p := range next {
				t := time.Now()
				r := goTest(dir, guard{Pkg: p, Run: strings.Join(byPkg[p], "|")}, race, timeout, false)
				mu.Lock()
				fmt.Printf("  %s: %d tests run, %v\n", p, r.ran, time.Since(t).Round(time.Second))
				switch {
				case r.err != nil:
					errs = append(errs, r.err)
				case r.buildFailed:
					errs = append(errs, fmt.Errorf("%s does not build:\n%s", p, r.output))
				default:
					failed = append(failed, r.failed...)
					for _, sk := range r.skipped {
						failed = append(failed, "skipped, so it cannot judge a mutant: "+sk)
					}
					if len(r.failed) == 0 && r.pkgFailed {
						failed = append(failed, p+" (package):\n"+r.output)
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, p := range pkgs {
		next <- p
	}
	close(next)
	wg.Wait()
	return failed, errors.Join(errs...)
}

// runMutant applies m in dir, runs its tests and puts dir back as it was (from root).
func runMutant(dir, root, sqlc string, m mutant, race bool, timeout time.Duration) result {
	originals := map[string][]byte{}
	regenerate := false
	defer func() {
		for f, b := range originals {
			_ = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if regenerate {
			_ = restoreDir(filepath.Join(dir, pristine), dir, sqlcDir)
		}
	}()
	for _, e := range m.Edits {
		path := filepath.Join(dir, e.File)
		b, err := os.ReadFile(path)
		if err != nil {
			return result{Status: "ERROR", Detail: err.Error()}
		}
		if _, ok := originals[e.File]; !ok {
			originals[e.File] = b
		}
		if n := strings.Count(string(b), e.Search); n != 1 {
			return result{Status: "ERROR", Detail: fmt.Sprintf("%s: search text found %d times, want exactly once (the code drifted): %q",
				filepath.ToSlash(e.File), n, firstLine(e.Search))}
		}
		b = []byte(strings.Replace(string(b), e.Search, e.Replace, 1))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return result{Status: "ERROR", Detail: err.Error()}
		}
		top := strings.SplitN(filepath.ToSlash(e.File), "/", 2)[0]
		if top == "queries" || top == "migrations" {
			regenerate = true
		}
	}
	if regenerate {
		if _, err := os.Stat(sqlc); err != nil {
			return result{Status: "ERROR", Detail: fmt.Sprintf("sqlc needed (%v): build it with make bin/sqlc, or pass -sqlc", err)}
		}
		cmd := exec.Command(sqlc, "generate")
		cmd.Dir = dir
		sqlcMu.Lock() // one at a time: runs at once in several copies were seen to fail
		out, err := cmd.CombinedOutput()
		sqlcMu.Unlock()
		if err != nil {
			return result{Status: "ERROR", Detail: fmt.Sprintf("sqlc generate: %v\n%s", err, out)}
		}
	}
	var killedBy, skipped []string
	var output strings.Builder
	for _, g := range m.Tests {
		r := goTest(dir, g, race, timeout, false)
		switch {
		case r.err != nil:
			return result{Status: "ERROR", Detail: r.err.Error()}
		case r.buildFailed:
			return result{Status: "ERROR", Detail: "the mutant does not compile (choose a mutation that builds): " + lastLines(r.output, 5)}
		case len(r.failed) > 0:
			for _, f := range r.failed {
				killedBy = append(killedBy, strings.TrimPrefix(g.Pkg, "./")+"."+f)
				output.WriteString(tail(r.testOutput[f], 25))
			}
		case r.pkgFailed:
			killedBy = append(killedBy, strings.TrimPrefix(g.Pkg, "./")+" (the test binary failed: "+lastLines(r.output, 3)+")")
		case r.ran == 0:
			return result{Status: "ERROR", Detail: fmt.Sprintf("no test of %s matches %q", g.Pkg, g.Run)}
		case len(r.skipped) > 0:
			skipped = append(skipped, r.skipped...)
		}
	}
	if len(killedBy) == 0 && len(skipped) > 0 {
		return result{Status: "ERROR", Detail: "guarding tests skipped, so nothing was judged: " + strings.Join(skipped, "; ")}
	}
	if len(killedBy) > 0 {
		return result{Status: "KILLED", Detail: strings.Join(killedBy, ", "), Output: output.String()}
	}
	return result{Status: "SURVIVED", Detail: "no guarding test failed"}
}

// pristine is the directory of a copy that keeps its generated code (sqlcDir) as copied; the go
// command ignores directories whose names begin with a dot.
const pristine = ".mutants-pristine"

var sqlcDir = filepath.Join("internal", "sqlc")

// sqlcMu serialises sqlc generate across the jobs.
var sqlcMu sync.Mutex

// restoreDir makes rel under dir what it is under root: same files, same contents.
func restoreDir(root, dir, rel string) error {
	if err := os.RemoveAll(filepath.Join(dir, rel)); err != nil {
		return err
	}
	return filepath.WalkDir(filepath.Join(root, rel), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		r, _ := filepath.Rel(root, path)
		dst := filepath.Join(dir, r)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return copyFile(path, dst, 0o644)
	})
}

// testRun is what one go test run gave.
type testRun struct {
	ran         int      // tests started
	failed      []string // tests that failed (subtests included)
	skipped     []string // tests that skipped (a browser or service they need is missing)
	pkgFailed   bool     // the package failed (a failed test, a panic, a timeout or a failed build)
	buildFailed bool
	output      string            // output not attributed to a test (build errors, panics)
	testOutput  map[string]string // each failed test's own output, by name
	err         error             // go test could not be run
}

// goTest runs the tests of g in dir with -json and reads their outcome.
func goTest(dir string, g guard, race bool, timeout time.Duration, failfast bool) testRun {
	args := []string{"test", "-json", "-count=1", "-timeout", timeout.String(), "-run", g.Run}
	if race {
		args = append(args, "-race")
	}
	if failfast {
		args = append(args, "-failfast")
	}
	mod, pkg := splitModule(dir, g.Pkg)
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(dir, mod)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return testRun{err: err}
	}
	if err := cmd.Start(); err != nil {
		return testRun{err: err}
	}
	var r testRun
	var pkgOut strings.Builder
	testOut := map[string]*strings.Builder{}
	timedOut := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Action, Test, Output string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			pkgOut.WriteString(sc.Text() + "\n")
			continue
		}
		switch {
		case ev.Action == "build-output":
			pkgOut.WriteString(ev.Output)
		case ev.Action == "build-fail":
			r.buildFailed = true
		case ev.Test != "" && ev.Action == "run":
			r.ran++
		case ev.Test != "" && ev.Action == "output":
			if testOut[ev.Test] == nil {
				testOut[ev.Test] = &strings.Builder{}
			}
			testOut[ev.Test].WriteString(ev.Output)
		case ev.Test != "" && ev.Action == "fail":
			r.failed = append(r.failed, ev.Test)
		case ev.Test != "" && ev.Action == "skip":
			r.skipped = append(r.skipped, ev.Test)
			if b := testOut[ev.Test]; b != nil {
				r.skipped[len(r.skipped)-1] += " (" + strings.TrimSpace(lastLines(b.String(), 2)) + ")"
			}
		case ev.Test == "" && ev.Action == "fail":
			r.pkgFailed = true
		case ev.Test == "" && ev.Action == "output":
			pkgOut.WriteString(ev.Output)
			if strings.Contains(ev.Output, "[build failed]") || strings.Contains(ev.Output, "[setup failed]") {
				r.buildFailed = true
			}
			if strings.HasPrefix(ev.Output, "panic: test timed out") {
				timedOut = true
			}
		}
	}
	waitErr := cmd.Wait()
	pkgOut.WriteString(stderr.String())
	r.output = pkgOut.String()
	r.testOutput = map[string]string{}
	for _, f := range r.failed {
		if b := testOut[f]; b != nil {
			r.testOutput[f] = b.String()
		}
	}
	if timedOut && len(r.failed) == 0 {
		// The tests still running when the timeout hit are listed after "running tests:".
		for _, l := range regexp.MustCompile(`(?m)^\s+(Test\S*) \(`).FindAllStringSubmatch(r.output, -1) {
			r.failed = append(r.failed, l[1]+" (timed out)")
		}
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		r.err = waitErr
	}
	if waitErr != nil && !r.pkgFailed && len(r.failed) == 0 && !r.buildFailed {
		r.err = fmt.Errorf("go test %s: %v\n%s", strings.Join(args[1:], " "), waitErr, lastLines(r.output, 20))
	}
	return r
}

// splitModule finds the module of pkg, a "./" package path of a test: line (it may end in "/..."),
// in the copy dir. It returns the module's directory, relative to dir, and pkg relative to it: the
// nearest directory at or above pkg with a go.mod of its own (a nested module, such as adapters), or
// "." and pkg as given when there is none (the repository's root module).
func splitModule(dir, pkg string) (mod, rel string) {
	p, tail := strings.TrimPrefix(pkg, "./"), ""
	if p == "..." || strings.HasSuffix(p, "/...") {
		p, tail = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/"), "/..."
	}
	p = path.Clean("./" + p)
	for d := p; d != "."; d = path.Dir(d) {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(d), "go.mod")); err == nil {
			rel = "."
			if p != d {
				rel = "./" + strings.TrimPrefix(p, d+"/")
			}
			return filepath.FromSlash(d), rel + tail
		}
	}
	return ".", pkg
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// tail returns the last n lines of s, one per line.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + strings.TrimRight(l, "\n") + "\n")
	}
	return b.String()
}
