package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// chartMarks parses an SVG document and returns its title and its data marks (elements whose class
// has the word "mark"), by element name; an error if it is not well-formed XML, its root is not an
// svg element, or a series' path has fewer than two points.
func chartMarks(data []byte) (title string, marks map[string]int, err error) {
	dec := xml.NewDecoder(bytes.NewReader(data))
	marks = map[string]int{}
	var stack []string
	var inTitle bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 && (t.Name.Local != "svg" || t.Name.Space != "http://www.w3.org/2000/svg") {
				return "", nil, fmt.Errorf("root element %s %s, want svg", t.Name.Space, t.Name.Local)
			}
			stack = append(stack, t.Name.Local)
			inTitle = t.Name.Local == "title" && len(stack) == 2
			for _, a := range t.Attr {
				if a.Name.Local != "class" || !slices.Contains(strings.Fields(a.Value), "mark") {
					continue
				}
				marks[t.Name.Local]++
				if slices.Contains(strings.Fields(a.Value), "series") {
					for _, b := range t.Attr {
						if b.Name.Local == "d" && strings.Count(b.Value, "L") < 1 {
							return "", nil, fmt.Errorf("series path %q has fewer than two points", b.Value)
						}
					}
				}
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
			inTitle = false
		case xml.CharData:
			if inTitle {
				title += string(t)
			}
		}
	}
	return strings.TrimSpace(title), marks, nil
}

// checkChart fails t unless data is an SVG chart with a title and at least one data mark.
func checkChart(t *testing.T, name string, data []byte) map[string]int {
	t.Helper()
	title, marks, err := chartMarks(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if title == "" {
		t.Errorf("%s: no <title>", name)
	}
	n := 0
	for _, c := range marks {
		n += c
	}
	if n == 0 {
		t.Errorf("%s: no data mark (an element of class mark)", name)
	}
	return marks
}

// Every chart committed under charts/ parses as SVG with a title and data, and every chart that
// RESULTS.md shows is there.
func TestCommittedCharts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("charts", "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no chart in charts/")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkChart(t, f, data)
	}
	report, err := os.ReadFile("RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := regexp.MustCompile(`!\[[^\]]*\]\((charts/[^)]+\.svg)\)`).FindAllSubmatch(report, -1)
	if len(shown) == 0 {
		t.Error("RESULTS.md shows no chart")
	}
	for _, m := range shown {
		if !slices.Contains(files, filepath.FromSlash(string(m[1]))) {
			t.Errorf("RESULTS.md shows %s, which is not in charts/", m[1])
		}
	}
}

// A bar chart draws one bar per system and one dot per run; a line chart one path per series (and a
// band where asked), and its title.
func TestChartsDrawTheirData(t *testing.T) {
	bars := BarChart{Title: "Drain <msg/s> & more", Unit: "msg/s", Bars: []Bar{
		{Label: "txinbox", Group: "txinbox", Value: 12707, Runs: []float64{13346, 11729, 12707}},
		{Label: "raw SQL, 100 per tx", Group: "raw", Value: 79400, Runs: []float64{73007, 82317, 79400}},
		{Label: "zero", Group: "raw", Value: 0},
	}}
	marks := checkChart(t, "bar chart", bars.SVG())
	if marks["rect"] != 3 || marks["circle"] != 6 {
		t.Errorf("bar chart marks %v, want 3 rect and 6 circle", marks)
	}
	title, _, _ := chartMarks(bars.SVG())
	if title != bars.Title {
		t.Errorf("title %q, want %q", title, bars.Title)
	}

	samples := make([]time.Duration, 1000)
	for i := range samples {
		samples[i] = time.Duration(i+1) * 100 * time.Microsecond
	}
	lines := LineChart{Title: "CDF", LogX: true, XLabel: "ms", YLabel: "%", YMin: 0, YMax: 100,
		Series: []Series{CDFSeries("a", samples), CDFSeries("b", samples[:10])}}
	marks = checkChart(t, "line chart", lines.SVG())
	if marks["path"] != 2 {
		t.Errorf("line chart marks %v, want 2 paths", marks)
	}
	cdf := lines.Series[0].Points
	if last := cdf[len(cdf)-1]; last.Y != 100 || last.X != 100 {
		t.Errorf("CDF ends at %+v, want the largest sample (100 ms) at 100%%", last)
	}
	if first := cdf[0]; first.X <= 0 || first.Y <= 0 || first.Y > 1 {
		t.Errorf("CDF starts at %+v", first)
	}

	band := LineChart{Title: "sizes", XLabel: "minute", YLabel: "MB", Spans: []Span{{From: 2, To: 7, Label: "held"}},
		Series: []Series{{Name: "old", Band: true, Dots: true, Points: []Point{{X: 1, Y: 7, Lo: 0, Hi: 7}, {X: 2, Y: 23, Lo: 7, Hi: 24}}}}}
	marks = checkChart(t, "band chart", band.SVG())
	if marks["path"] != 2 {
		t.Errorf("band chart marks %v, want a band and a line", marks)
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 42373.4: "42,373", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := Thousands(in); got != want {
			t.Errorf("Thousands(%v) = %q, want %q", in, got, want)
		}
	}
}
