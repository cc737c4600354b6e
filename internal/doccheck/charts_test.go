// Package doccheck holds tests of the repository's documents that the root module's test run checks
// (the bench module's own tests are only compiled by make test).
package doccheck

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// benchDir is the bench module, whose report bench/RESULTS.md shows the charts of bench/charts.
var benchDir = filepath.Join("..", "..", "bench")

// svgChart is what a chart holds: its title (the <title> child of the root svg element) and its data
// marks (elements whose class has the word "mark": bars, run dots, series paths, bands), by element
// name. A series path with fewer than two points is counted as a bad mark.
type svgChart struct {
	title    string
	marks    map[string]int
	badMarks []string
}

// parseChart parses data as an SVG document: well-formed XML whose root is an svg element of the SVG
// namespace.
func parseChart(data []byte) (svgChart, error) {
	c := svgChart{marks: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(data))
	depth, inTitle := 0, false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (t.Name.Local != "svg" || t.Name.Space != "http://www.w3.org/2000/svg") {
				return c, errors.New("the root element is not svg in the SVG namespace")
			}
			depth++
			inTitle = depth == 2 && t.Name.Local == "title"
			var class, d string
			for _, a := range t.Attr {
				switch a.Name.Local {
				case "class":
					class = a.Value
				case "d":
					d = a.Value
				}
			}
			classes := strings.Fields(class)
			if !slices.Contains(classes, "mark") {
				continue
			}
			c.marks[t.Name.Local]++
			if slices.Contains(classes, "series") && strings.Count(d, "L") < 1 {
				c.badMarks = append(c.badMarks, d)
			}
		case xml.EndElement:
			depth--
			inTitle = false
		case xml.CharData:
			if inTitle {
				c.title += string(t)
			}
		}
	}
	if depth != 0 {
		return c, errors.New("unclosed elements")
	}
	c.title = strings.TrimSpace(c.title)
	return c, nil
}

// TestBenchChartsParse checks every SVG chart committed under bench/charts: it parses as XML, has a
// title and at least one data mark, and every series path has points; and every chart that
// bench/RESULTS.md shows as an image is one of them.
func TestBenchChartsParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(benchDir, "charts", "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no chart in bench/charts")
	}
	var names []string
	for _, f := range files {
		names = append(names, "charts/"+filepath.Base(f))
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := parseChart(data)
		if err != nil {
			t.Errorf("%s: not SVG: %v", f, err)
			continue
		}
		if c.title == "" {
			t.Errorf("%s: no <title>", f)
		}
		n := 0
		for _, k := range c.marks {
			n += k
		}
		if n == 0 {
			t.Errorf("%s: no data mark (an element of class mark)", f)
		}
		if len(c.badMarks) > 0 {
			t.Errorf("%s: series paths with fewer than two points: %q", f, c.badMarks)
		}
	}
	report, err := os.ReadFile(filepath.Join(benchDir, "RESULTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := regexp.MustCompile(`!\[[^\]]*\]\((charts/[^)]+\.svg)\)`).FindAllStringSubmatch(string(report), -1)
	if len(shown) == 0 {
		t.Error("bench/RESULTS.md shows no chart")
	}
	for _, m := range shown {
		if !slices.Contains(names, m[1]) {
			t.Errorf("bench/RESULTS.md shows %s, which is not in bench/charts", m[1])
		}
	}
}

// The checks catch what they are for: a document that is not XML, a chart without a title, one
// without data.
func TestParseChartRejects(t *testing.T) {
	const ns = `xmlns="http://www.w3.org/2000/svg"`
	for name, doc := range map[string]string{
		"not XML":      `<svg ` + ns + `><title>t</title><rect class="mark bar"></svg>`,
		"not svg":      `<html><title>t</title></html>`,
		"no namespace": `<svg><title>t</title><rect class="mark bar"/></svg>`,
	} {
		if _, err := parseChart([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	c, err := parseChart([]byte(`<svg ` + ns + `><text>t</text><path class="mark series" d="M1 2"/><rect class="bar"/></svg>`))
	if err != nil {
		t.Fatal(err)
	}
	if c.title != "" || c.marks["rect"] != 0 || c.marks["path"] != 1 || len(c.badMarks) != 1 {
		t.Errorf("got %+v: want no title, no rect mark, one bad path", c)
	}
}
