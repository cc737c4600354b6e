package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Charts of the benchmarks' results, written as small SVG files by hand (no plotting library). Every
// data mark of a chart (a bar, a run's dot, a series' path or band) has the class "mark" among its
// classes and a data-* attribute with the values it draws, so a chart can be checked by parsing it
// as XML; the chart's title is its <title> element and its first visible text.

// chartPalette holds colours that stay apart for readers with colour vision deficiencies (Okabe and
// Ito), in the order series take them.
var chartPalette = []string{"#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000"}

// Bar is one bar of a BarChart: its median Value, and the Runs it is the median of (drawn as dots;
// may be empty). Group picks the bar's colour: bars of one group share it.
type Bar struct {
	Label string
	Group string
	Value float64
	Runs  []float64
}

// BarChart is a horizontal bar chart, one bar per row, with its value written at the bar's end.
type BarChart struct {
	Title    string
	Subtitle string
	Unit     string // of the values, written on the axis ("msg/s")
	Bars     []Bar
}

// Point is one point of a Series.
type Point struct {
	X, Y float64
	// Lo and Hi, when Band is set on the series, are the least and most values of Y around X (a
	// band is drawn between them).
	Lo, Hi float64
}

// Series is one line of a LineChart.
type Series struct {
	Name   string
	Points []Point // in order of X
	Band   bool    // draw the band between the points' Lo and Hi
	Dots   bool    // draw a dot at each point
}

// Span is a shaded range of X in a LineChart, labelled.
type Span struct {
	From, To float64
	Label    string
}

// LineChart draws series of points against a linear or logarithmic X axis.
type LineChart struct {
	Title    string
	Subtitle string
	XLabel   string
	YLabel   string
	LogX     bool // X axis in powers of ten (an X below XMin is drawn at XMin)
	// XMin and XMax bound the X axis: both as given when XMax > XMin; otherwise a bound left zero
	// comes from the data (on a log axis, the power of ten below or above it).
	XMin    float64
	XMax    float64
	YMin    float64 // Y axis bounds; both zero: from 0 to the data's largest value
	YMax    float64
	YFormat func(float64) string // tick labels of Y; nil: plain numbers
	Series  []Series
	Spans   []Span
}

// chart geometry, in SVG user units (pixels at scale 1).
const (
	chartWidth   = 860
	chartMarginL = 70
	chartMarginR = 30
	subtitleLine = 16  // height of a line of the subtitle
	subtitleMax  = 120 // characters on a line of the subtitle
)

// wrap splits s into lines of at most n characters, at spaces.
func wrap(s string, n int) []string {
	var lines []string
	var cur string
	for _, w := range strings.Fields(s) {
		if cur != "" && len([]rune(cur))+1+len([]rune(w)) > n {
			lines = append(lines, cur)
			cur = ""
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

// chartTop is the y below the title and the subtitle's lines.
func chartTop(subtitle string) int { return 30 + subtitleLine*len(wrap(subtitle, subtitleMax)) + 8 }

// svgWriter accumulates an SVG document.
type svgWriter struct{ b bytes.Buffer }

func (w *svgWriter) f(format string, args ...any) { fmt.Fprintf(&w.b, format, args...) }

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to a bytes.Buffer: cannot fail
	return b.String()
}

// num formats a coordinate with at most one decimal.
func num(x float64) string { return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64) }

func (w *svgWriter) open(width, height int, title, subtitle string) {
	w.f(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	w.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	w.f("<title>%s</title>\n", esc(title))
	if subtitle != "" {
		w.f("<desc>%s</desc>\n", esc(subtitle))
	}
	w.f(`<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	w.f(`<text x="%d" y="24" font-size="16" font-weight="bold" fill="#111111">%s</text>`+"\n", chartMarginL-50, esc(title))
	for i, line := range wrap(subtitle, subtitleMax) {
		w.f(`<text x="%d" y="%d" fill="#444444">%s</text>`+"\n", chartMarginL-50, 44+subtitleLine*i, esc(line))
	}
}

func (w *svgWriter) close() []byte {
	w.f("</svg>\n")
	return w.b.Bytes()
}

// niceStep returns a step of 1, 2 or 5 times a power of ten, about span/n.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// Thousands formats x rounded to a whole number with commas between thousands: 42373 → "42,373".
func Thousands(x float64) string {
	s := strconv.FormatInt(int64(math.Round(math.Abs(x))), 10)
	var b strings.Builder
	if x < 0 && math.Round(x) != 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// tickLabel formats an axis value without trailing zeros.
func tickLabel(x float64) string {
	if math.Abs(x) >= 1000 {
		return Thousands(x)
	}
	return strconv.FormatFloat(x, 'g', 6, 64)
}

// SVG draws the bar chart.
func (c BarChart) SVG() []byte {
	const rowH, barH, labelW = 34, 20, 230
	top0 := chartTop(c.Subtitle)
	plotL, plotR := float64(labelW), float64(chartWidth-90)
	height := top0 + 20 + rowH*len(c.Bars) + 50
	maxV := 0.0
	for _, b := range c.Bars {
		maxV = max(maxV, b.Value)
		for _, r := range b.Runs {
			maxV = max(maxV, r)
		}
	}
	step := niceStep(maxV, 5)
	top := step * math.Ceil(maxV/step)
	if top <= 0 {
		top = 1
	}
	x := func(v float64) float64 { return plotL + (plotR-plotL)*v/top }
	var w svgWriter
	w.open(chartWidth, height, c.Title, c.Subtitle)
	plotT, plotB := float64(top0+10), float64(top0+20+rowH*len(c.Bars))
	// Grid and axis.
	for v := 0.0; v <= top+step/2; v += step {
		w.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>`+"\n", num(x(v)), num(plotT), num(x(v)), num(plotB))
		w.f(`<text x="%s" y="%s" text-anchor="middle" fill="#444444">%s</text>`+"\n", num(x(v)), num(plotB+16), esc(tickLabel(v)))
	}
	w.f(`<text x="%s" y="%s" text-anchor="middle" fill="#444444">%s</text>`+"\n", num((plotL+plotR)/2), num(plotB+36), esc(c.Unit))
	groups := map[string]string{}
	for i, b := range c.Bars {
		colour, ok := groups[b.Group]
		if !ok {
			colour = chartPalette[len(groups)%len(chartPalette)]
			groups[b.Group] = colour
		}
		y := plotT + 10 + float64(rowH*i)
		w.f(`<text x="%d" y="%s" text-anchor="end" fill="#111111">%s</text>`+"\n", labelW-8, num(y+barH/2+4), esc(b.Label))
		w.f(`<rect class="mark bar" data-label="%s" data-value="%s" x="%s" y="%s" width="%s" height="%d" fill="%s"/>`+"\n",
			esc(b.Label), strconv.FormatFloat(b.Value, 'f', -1, 64), num(plotL), num(y), num(x(b.Value)-plotL), barH, colour)
		for _, r := range b.Runs {
			w.f(`<circle class="mark run" data-value="%s" cx="%s" cy="%s" r="3" fill="#ffffff" stroke="#111111"/>`+"\n",
				strconv.FormatFloat(r, 'f', -1, 64), num(x(r)), num(y+barH/2))
		}
		w.f(`<text x="%s" y="%s" fill="#111111">%s</text>`+"\n", num(x(max(b.Value, maxRun(b.Runs)))+6), num(y+barH/2+4), esc(Thousands(b.Value)))
	}
	w.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#444444"/>`+"\n", num(plotL), num(plotT), num(plotL), num(plotB))
	return w.close()
}

func maxRun(rs []float64) float64 {
	m := 0.0
	for _, r := range rs {
		m = max(m, r)
	}
	return m
}

// SVG draws the line chart.
func (c LineChart) SVG() []byte {
	const plotH, legendRow = 330, 18
	top0 := chartTop(c.Subtitle)
	height := top0 + plotH + 60 + legendRow*len(c.Series)
	plotL, plotR := float64(chartMarginL), float64(chartWidth-chartMarginR)
	plotT, plotB := float64(top0+10), float64(top0+10+plotH)

	dmin, dmax := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			if c.LogX && p.X <= 0 {
				continue
			}
			dmin, dmax = min(dmin, p.X), max(dmax, p.X)
		}
	}
	if math.IsInf(dmin, 0) {
		dmin, dmax = 1, 10
	}
	if c.LogX {
		dmin, dmax = math.Pow(10, math.Floor(math.Log10(dmin))), math.Pow(10, math.Ceil(math.Log10(dmax)))
	}
	xmin, xmax := c.XMin, c.XMax
	if xmax <= xmin {
		if xmin == 0 {
			xmin = dmin
		}
		if xmax == 0 {
			xmax = dmax
		}
	}
	if xmax <= xmin {
		xmax = xmin * 10
		if !c.LogX {
			xmax = xmin + 1
		}
	}
	ymin, ymax := c.YMin, c.YMax
	if ymin == 0 && ymax == 0 {
		for _, s := range c.Series {
			for _, p := range s.Points {
				ymax = max(ymax, p.Y)
				if s.Band {
					ymax = max(ymax, p.Hi)
				}
			}
		}
		step := niceStep(ymax, 5)
		ymax = step * math.Ceil(ymax/step)
		if ymax <= 0 {
			ymax = 1
		}
	}
	fx := func(v float64) float64 {
		if c.LogX {
			v = max(v, xmin)
			return plotL + (plotR-plotL)*(math.Log10(v)-math.Log10(xmin))/(math.Log10(xmax)-math.Log10(xmin))
		}
		return plotL + (plotR-plotL)*(v-xmin)/(xmax-xmin)
	}
	fy := func(v float64) float64 { return plotB - (plotB-plotT)*(v-ymin)/(ymax-ymin) }
	yfmt := c.YFormat
	if yfmt == nil {
		yfmt = tickLabel
	}

	var w svgWriter
	w.open(chartWidth, height, c.Title, c.Subtitle)
	for _, sp := range c.Spans {
		x1, x2 := fx(max(sp.From, xmin)), fx(min(sp.To, xmax))
		w.f(`<rect x="%s" y="%s" width="%s" height="%s" fill="#eeeeee"/>`+"\n", num(x1), num(plotT), num(x2-x1), num(plotB-plotT))
		w.f(`<text x="%s" y="%s" text-anchor="middle" fill="#444444">%s</text>`+"\n", num((x1+x2)/2), num(plotT+14), esc(sp.Label))
	}
	// Y grid.
	ystep := niceStep(ymax-ymin, 5)
	for v := ymin; v <= ymax+ystep/2; v += ystep {
		w.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>`+"\n", num(plotL), num(fy(v)), num(plotR), num(fy(v)))
		w.f(`<text x="%s" y="%s" text-anchor="end" fill="#444444">%s</text>`+"\n", num(plotL-6), num(fy(v)+4), esc(yfmt(v)))
	}
	// X grid.
	if c.LogX {
		for e := math.Floor(math.Log10(xmin)); math.Pow(10, e) <= xmax*1.0001; e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if v < xmin*0.9999 || v > xmax*1.0001 {
					continue
				}
				stroke := "#eeeeee"
				if m == 1 {
					stroke = "#cccccc"
				}
				w.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`+"\n", num(fx(v)), num(plotT), num(fx(v)), num(plotB), stroke)
				w.f(`<text x="%s" y="%s" text-anchor="middle" fill="#444444">%s</text>`+"\n", num(fx(v)), num(plotB+16), esc(tickLabel(v)))
			}
		}
	} else {
		xstep := niceStep(xmax-xmin, 10)
		for v := math.Ceil(xmin/xstep) * xstep; v <= xmax+xstep/2; v += xstep {
			w.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>`+"\n", num(fx(v)), num(plotT), num(fx(v)), num(plotB))
			w.f(`<text x="%s" y="%s" text-anchor="middle" fill="#444444">%s</text>`+"\n", num(fx(v)), num(plotB+16), esc(tickLabel(v)))
		}
	}
	w.f(`<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#444444"/>`+"\n", num(plotL), num(plotT), num(plotR-plotL), num(plotB-plotT))
	w.f(`<text x="%s" y="%s" text-anchor="middle" fill="#444444">%s</text>`+"\n", num((plotL+plotR)/2), num(plotB+36), esc(c.XLabel))
	w.f(`<text transform="translate(%s %s) rotate(-90)" text-anchor="middle" fill="#444444">%s</text>`+"\n", num(plotL-52), num((plotT+plotB)/2), esc(c.YLabel))

	for i, s := range c.Series {
		colour := chartPalette[i%len(chartPalette)]
		if s.Band && len(s.Points) > 0 {
			var d strings.Builder
			for j, p := range s.Points {
				cmd := "L"
				if j == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&d, "%s%s %s ", cmd, num(fx(p.X)), num(fy(p.Hi)))
			}
			for j := len(s.Points) - 1; j >= 0; j-- {
				p := s.Points[j]
				fmt.Fprintf(&d, "L%s %s ", num(fx(p.X)), num(fy(p.Lo)))
			}
			w.f(`<path class="mark band" data-series="%s" d="%sZ" fill="%s" fill-opacity="0.18" stroke="none"/>`+"\n", esc(s.Name), d.String(), colour)
		}
		var d strings.Builder
		var data []string
		for j, p := range s.Points {
			cmd := "L"
			if j == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%s %s ", cmd, num(fx(p.X)), num(fy(p.Y)))
			data = append(data, strconv.FormatFloat(p.X, 'g', 6, 64)+","+strconv.FormatFloat(p.Y, 'g', 6, 64))
		}
		w.f(`<path class="mark series" data-series="%s" data-points="%s" d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n",
			esc(s.Name), esc(strings.Join(data, " ")), strings.TrimSpace(d.String()), colour)
		if s.Dots {
			for _, p := range s.Points {
				w.f(`<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", num(fx(p.X)), num(fy(p.Y)), colour)
			}
		}
		ly := plotB + 58 + float64(legendRow*i)
		w.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>`+"\n", num(plotL), num(ly-4), num(plotL+24), num(ly-4), colour)
		label := s.Name
		if s.Band {
			label += " (band: least and most sampled)"
		}
		w.f(`<text x="%s" y="%s" fill="#111111">%s</text>`+"\n", num(plotL+32), num(ly), esc(label))
	}
	return w.close()
}

// CDFSeries turns sorted samples into the points of a cumulative distribution: X the sample in
// milliseconds, Y the percentage of samples at or below it. It keeps about 400 points, more of them
// in the tail (99th percentile and up), and the largest sample.
func CDFSeries(name string, sorted []time.Duration) Series {
	s := Series{Name: name}
	n := len(sorted)
	if n == 0 {
		return s
	}
	var qs []float64
	for i := 1; i <= 396; i++ {
		qs = append(qs, float64(i)/400)
	}
	qs = append(qs, 0.9925, 0.995, 0.9975, 0.999, 0.9995, 0.9999, 1)
	last := -1
	for _, q := range qs {
		i := min(n-1, max(0, int(math.Ceil(q*float64(n)))-1))
		if i == last {
			continue
		}
		last = i
		s.Points = append(s.Points, Point{X: float64(sorted[i]) / float64(time.Millisecond), Y: 100 * float64(i+1) / float64(n)})
	}
	return s
}

// WriteChart writes svg to dir/name.svg, creating dir.
func WriteChart(dir, name string, svg []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".svg")
	return path, os.WriteFile(path, svg, 0o644)
}
