package console

import (
	"fmt"
	"time"

	"github.com/txinbox/txinbox/admin"
)

// chart is a consumer's finished attempts per minute, drawn as stacked bars (completed below,
// failed above) in an inline SVG by the overview template. Every number is computed here; the
// template only places them, escaped.
type chart struct {
	Label  string // accessible description
	W, H   int
	Bars   []bar
	Max    int64
	Empty  bool
	FromTo string
	AxisY  int // y of the baseline
}

type bar struct {
	X, W            float64
	YOK, HOK        float64
	YFail, HFail    float64
	Title           string
	Completed, Fail int64
}

const (
	chartW   = 300
	chartH   = 60
	chartPad = 2
)

// newChart lays out minutes (in minute order) over the last n minutes up to now.
func newChart(consumer string, minutes []admin.MinuteCounts, now time.Time, n int) chart {
	c := chart{W: chartW, H: chartH + chartPad, AxisY: chartH, Empty: true}
	end := now.UTC().Truncate(time.Minute)
	start := end.Add(-time.Duration(n-1) * time.Minute)
	c.FromTo = start.Format("15:04") + "–" + end.Format("15:04") + " UTC"
	byMinute := map[int64]admin.MinuteCounts{}
	for _, m := range minutes {
		byMinute[m.Minute.UTC().Truncate(time.Minute).Unix()] = m
		if t := m.Completed + m.Failed; t > c.Max {
			c.Max = t
		}
	}
	var total, failed int64
	slot := float64(chartW) / float64(n)
	for i := range n {
		at := start.Add(time.Duration(i) * time.Minute)
		m, ok := byMinute[at.Unix()]
		if !ok || m.Completed+m.Failed == 0 {
			continue
		}
		c.Empty = false
		total += m.Completed
		failed += m.Failed
		scale := float64(chartH) / float64(c.Max)
		hOK := float64(m.Completed) * scale
		hFail := float64(m.Failed) * scale
		c.Bars = append(c.Bars, bar{
			X: float64(i) * slot, W: max(slot-1, 1),
			YOK: chartH - hOK, HOK: hOK, YFail: chartH - hOK - hFail, HFail: hFail,
			Completed: m.Completed, Fail: m.Failed,
			Title: fmt.Sprintf("%s UTC: %d completed, %d failed (%d dead)", at.Format("15:04"), m.Completed, m.Failed, m.Dead),
		})
	}
	c.Label = fmt.Sprintf("%s: %d completed and %d failed attempts per minute, %s (peak %d/min)", consumer, total, failed, c.FromTo, c.Max)
	return c
}
