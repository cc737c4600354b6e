//go:build !oldlayout

package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/txinbox/txinbox/bench"
)

// chartCommand is `txretain chart [flags] RUNSDIR`: it reads the minute lines of the runs kept in
// RUNSDIR (for each run RUN: RUN-old.txt and RUN-new.txt, or .out, the two layouts' outputs, and
// RUN-load.txt, its first line printed by bench/retention.sh), draws each run's inbox size over time, both layouts
// on one chart, as CHARTS/retention-RUN.svg, and writes the table of the runs into the section
// "retention" of the report file (its image links assume CHARTS is the directory charts beside it).
// bench/retention.sh runs it after its runs. It is built with the new layout's tree only (it uses
// the bench package's charts).
func chartCommand(args []string) int {
	fs := flag.NewFlagSet("txretain chart", flag.ContinueOnError)
	charts := fs.String("charts", "charts", "directory of the charts")
	results := fs.String("results", "", "Markdown report whose section \"retention\" is replaced (empty: the section is printed only)")
	runs := fs.String("runs", "", "runs to read, comma-separated (empty: every RUN with a RUN-old.txt or RUN-old.out in RUNSDIR)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: txretain chart [-charts DIR] [-results FILE] [-runs a,b] RUNSDIR")
		return 2
	}
	names := strings.Split(*runs, ",")
	if *runs == "" {
		names = nil
		for _, ext := range []string{".txt", ".out"} {
			olds, _ := filepath.Glob(filepath.Join(fs.Arg(0), "*-old"+ext)) // the pattern is valid
			for _, f := range olds {
				if name := strings.TrimSuffix(filepath.Base(f), "-old"+ext); !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
		if len(names) == 0 {
			fmt.Fprintln(os.Stderr, "txretain chart: no RUN-old.txt or RUN-old.out in", fs.Arg(0))
			return 1
		}
		slices.Sort(names)
	}
	if err := writeCharts(fs.Arg(0), *charts, *results, names); err != nil {
		fmt.Fprintln(os.Stderr, "txretain chart:", err)
		return 1
	}
	return 0
}

// retentionRun is one run of bench/retention.sh: both layouts' minutes and its load line.
type retentionRun struct {
	name     string
	load     string // the run's first line of RUN-load.txt
	trees    string // its line "trees: ...", the commits measured
	old, new []minuteLine
}

// minuteLine is one "minute=..." line of txretain's output, as its key=value fields.
type minuteLine map[string]string

func (m minuteLine) num(key string) (float64, bool) {
	v, err := strconv.ParseFloat(m[key], 64)
	return v, err == nil
}

// readMinutes reads the minute lines of one layout's output (other lines are ignored).
func readMinutes(r io.Reader) ([]minuteLine, error) {
	var out []minuteLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "minute=") {
			continue
		}
		m := minuteLine{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				m[k] = v
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

func readRun(dir, name string) (retentionRun, error) {
	run := retentionRun{name: name}
	for _, layout := range []string{"old", "new"} {
		f, err := os.Open(filepath.Join(dir, name+"-"+layout+".txt"))
		if os.IsNotExist(err) {
			f, err = os.Open(filepath.Join(dir, name+"-"+layout+".out"))
		}
		if err != nil {
			return run, err
		}
		ms, err := readMinutes(f)
		f.Close()
		if err != nil {
			return run, err
		}
		if len(ms) == 0 {
			return run, fmt.Errorf("%s-%s: no minute line", name, layout)
		}
		if layout == "old" {
			run.old = ms
		} else {
			run.new = ms
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, name+"-load.txt")); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		run.load = strings.TrimSpace(strings.TrimPrefix(lines[0], "run "+name+": "))
		for _, l := range lines[1:] {
			if t, ok := strings.CutPrefix(l, "trees: "); ok {
				run.trees = strings.TrimSpace(t)
			}
		}
	}
	return run, nil
}

// sizeSeries is a layout's inbox size at the end of each minute, with the least and most sampled.
func sizeSeries(name string, ms []minuteLine) bench.Series {
	s := bench.Series{Name: name, Band: true, Dots: true}
	for _, m := range ms {
		x, _ := m.num("minute")
		y, _ := m.num("inbox_mb")
		lo, okLo := m.num("inbox_min_mb")
		hi, okHi := m.num("inbox_max_mb")
		if !okLo || !okHi {
			lo, hi = y, y
		}
		s.Points = append(s.Points, bench.Point{X: x, Y: y, Lo: lo, Hi: hi})
	}
	return s
}

// heldSpan returns the minutes during which the run held a transaction open (minute i covers the
// time from i-1 to i), if it did.
func heldSpan(ms []minuteLine) (bench.Span, bool) {
	first, last := -1.0, -1.0
	for _, m := range ms {
		if m["held"] != "true" {
			continue
		}
		x, _ := m.num("minute")
		if first < 0 {
			first = x
		}
		last = x
	}
	if first < 0 {
		return bench.Span{}, false
	}
	return bench.Span{From: first - 1, To: last, Label: "transaction held open (xmin)"}, true
}

func (run retentionRun) chart() bench.LineChart {
	title := "Retention, run " + run.name + ": inbox size (table and indexes) per minute"
	c := bench.LineChart{
		Title:    title,
		Subtitle: run.load,
		XLabel:   "minutes since the start",
		YLabel:   "MB",
		XMin:     0,
		XMax:     float64(len(run.new)),
		Series: []bench.Series{
			sizeSeries("old layout: one table, expired rows deleted", run.old),
			sizeSeries("generations: partitions rotated and truncated", run.new),
		},
	}
	if sp, ok := heldSpan(run.new); ok {
		c.Spans = []bench.Span{sp}
	}
	return c
}

// summaryRow is one row of the retention table: a layout's figures in one run.
func summaryRow(run, layout string, ms []minuteLine) string {
	tail := ms[max(0, len(ms)-5):]
	endLo, endHi, lo, hi, most := 1e18, 0.0, 1e18, 0.0, 0.0
	for _, m := range tail {
		y, _ := m.num("inbox_mb")
		l, _ := m.num("inbox_min_mb")
		h, _ := m.num("inbox_max_mb")
		endLo, endHi, lo, hi = min(endLo, y), max(endHi, y), min(lo, l), max(hi, h)
	}
	var wal, done, recv5, done5, n5, queue float64
	for _, m := range ms {
		x, _ := m.num("minute")
		h, _ := m.num("inbox_max_mb")
		q, _ := m.num("queue_mb")
		most, queue = max(most, h), max(queue, q)
		d, _ := m.num("done_per_s")
		if w, ok := m.num("wal_b_per_msg"); ok && x >= 3 {
			wal += w * d
			done += d
		}
		if x >= 5 {
			r, _ := m.num("recv_per_s")
			recv5, done5, n5 = recv5+r, done5+d, n5+1
		}
	}
	walPerMsg, rates := "–", "–"
	if done > 0 {
		walPerMsg = bench.Thousands(wal / done)
	}
	if n5 > 0 {
		rates = fmt.Sprintf("%.0f / %.0f", recv5/n5, done5/n5)
	}
	return fmt.Sprintf("| %s | %s | %.1f–%.1f | %.1f–%.1f | **%.1f** | %s | %s | %.1f |", run, layout, endLo, endHi, lo, hi, most, walPerMsg, rates, queue)
}

func writeCharts(dir, charts, results string, names []string) error {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format+"\n", args...) }
	p("## Retention by generations\n")
	p("Measured by `bench/retention.sh` (`make bench-retention`); the per-minute lines of each run are in `bench/retention/runs/`.\n")
	var runs []retentionRun
	for _, name := range names {
		run, err := readRun(dir, strings.TrimSpace(name))
		if err != nil {
			return err
		}
		runs = append(runs, run)
		if run.trees != "" {
			p("- Run %s: %s; trees: %s.", run.name, run.load, run.trees)
		} else {
			p("- Run %s: %s.", run.name, run.load)
		}
	}
	p("")
	p("| Run | Layout | Inbox MB at the last 5 minute ends | Inbox MB sampled in them, least–most | Inbox MB, most sampled in the run | WAL bytes per message, minute 3 on | Received / completed per s, minute 5 on | inbox_queue MB, most |")
	p("|---|---|---:|---:|---:|---:|---:|---:|")
	for _, run := range runs {
		p("%s", summaryRow(run.name, "old (one table, rows deleted)", run.old))
		p("%s", summaryRow(run.name, "generations", run.new))
	}
	p("")
	for _, run := range runs {
		path, err := bench.WriteChart(charts, "retention-"+run.name, run.chart().SVG())
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(filepath.Join(filepath.Base(filepath.Dir(path)), filepath.Base(path)))
		p("![Retention, run %s: inbox size per minute, both layouts](%s)\n", run.name, rel)
	}
	fmt.Print(md.String())
	if results == "" {
		return nil
	}
	return bench.WriteSection(results, "retention", md.String())
}
