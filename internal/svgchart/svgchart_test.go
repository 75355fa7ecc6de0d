package svgchart_test

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/svgchart"
	"github.com/sandstorm-go/sandstorm/internal/svgchart/svgtest"
)

func render(t *testing.T, p interface {
	WriteTo(io.Writer) (int64, error)
}) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := p.WriteTo(&b)
	if err != nil || n != int64(b.Len()) {
		t.Fatalf("WriteTo: %d, %v (wrote %d)", n, err, b.Len())
	}
	return b.Bytes()
}

func TestChart(t *testing.T) {
	tests := []struct {
		name      string
		c         svgchart.Chart
		lines     map[string]int // polylines per series
		marks     int
		ticks     []string // tick labels that must appear
		wantTexts []string // other texts
	}{
		{
			name: "linear from zero, escaped names, a reference line",
			c: svgchart.Chart{Title: "t <1> & more", X: svgchart.Axis{Label: "time (s)"}, Y: svgchart.Axis{Label: "p90 ms"},
				Refs: []svgchart.Ref{{Y: 250, Label: "target 250 ms"}},
				Series: []svgchart.Series{
					{Name: "a", Points: []svgchart.Point{{1, 10}, {2, 300}, {3, 200}}},
					{Name: "b<", Points: []svgchart.Point{{1, 5}, {3, 6}}, Dashed: true},
				}},
			lines:     map[string]int{"a": 1, "b<": 1},
			ticks:     []string{"0", "100", "200", "300"},
			wantTexts: []string{"t <1> & more", "time (s)", "p90 ms", "target 250 ms", "a", "b<"},
		},
		{
			name: "log2 users axis with marks, legend on the right",
			c: svgchart.Chart{X: svgchart.Axis{Label: "users", Scale: svgchart.Log2}, Legend: svgchart.LegendRight,
				Series: []svgchart.Series{{Name: "p90", Marks: true, Points: []svgchart.Point{{1, 1}, {4, 2}, {16, 3}, {0, 9}}}}},
			lines: map[string]int{"p90": 1},
			marks: 3, // x = 0 cannot be shown on a log axis
			ticks: []string{"1", "2", "4", "8", "16"},
		},
		{
			name: "segments, steps and a right axis",
			c: svgchart.Chart{Y: svgchart.Axis{Label: "queue"}, Y2: svgchart.Axis{Label: "threads"},
				Series: []svgchart.Series{
					{Name: "queue", Segments: [][]svgchart.Point{{{0, 1}, {1, 2}}, {{5, 3}, {6, 1}}}},
					{Name: "threads", Right: true, Step: true, Points: []svgchart.Point{{0, 1}, {1, 4}, {2, 2}}},
				}},
			lines:     map[string]int{"queue": 2, "threads": 1},
			wantTexts: []string{"queue", "threads"},
		},
		{
			name: "log10 axis with given ticks",
			c: svgchart.Chart{X: svgchart.Axis{Scale: svgchart.Log10, Ticks: []float64{0.1, 1, 10, 100, 1000}},
				Series: []svgchart.Series{{Name: "cdf", Points: []svgchart.Point{{0.5, 0.1}, {5, 0.5}, {500, 1}}}}},
			lines: map[string]int{"cdf": 1},
			ticks: []string{"0.1", "1", "10", "100", "1000"},
		},
		{
			name:  "no data at all",
			c:     svgchart.Chart{Title: "empty", Series: []svgchart.Series{{Name: "none"}}},
			lines: map[string]int{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := svgtest.Parse(t, render(t, &tt.c))
			lines := svgtest.Series(es, "polyline")
			if len(lines) != len(tt.lines) {
				t.Errorf("series drawn: %v, want %v", keys(lines), tt.lines)
			}
			for name, n := range tt.lines {
				if len(lines[name]) != n {
					t.Errorf("series %q: %d polylines, want %d", name, len(lines[name]), n)
				}
			}
			marks := 0
			for _, m := range svgtest.Series(es, "circle") {
				marks += len(m)
			}
			if marks != tt.marks {
				t.Errorf("%d marks, want %d", marks, tt.marks)
			}
			all := svgtest.Texts(es)
			for _, want := range slices.Concat(tt.ticks, tt.wantTexts) {
				if !slices.Contains(all, want) {
					t.Errorf("no text %q in %q", want, all)
				}
			}
			frames := 0
			for _, e := range es {
				if e.Name == "rect" && e.Attr["fill"] == "none" {
					frames++
				}
			}
			if frames != 1 {
				t.Errorf("%d plot frames, want 1", frames)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// On a log axis, equal ratios are equal distances; SVG's y grows down.
func TestLogAxisSpacing(t *testing.T) {
	c := svgchart.Chart{X: svgchart.Axis{Scale: svgchart.Log10, Ticks: []float64{1, 4, 16}},
		Series: []svgchart.Series{{Name: "a", Points: []svgchart.Point{{1, 8}, {4, 24}, {16, 32}}}}}
	l := svgtest.Series(svgtest.Parse(t, render(t, &c)), "polyline")["a"]
	if len(l) != 1 {
		t.Fatalf("%d lines", len(l))
	}
	p := svgtest.Points(t, l[0])
	if d1, d2 := p[1][0]-p[0][0], p[2][0]-p[1][0]; d1 <= 0 || math.Abs(d1-d2) > 0.2 {
		t.Errorf("1, 4, 16 not equally spaced: %v", p)
	}
	if !(p[2][1] < p[1][1] && p[1][1] < p[0][1]) {
		t.Errorf("y not increasing upwards: %v", p)
	}
}

func TestBarChartAndFigure(t *testing.T) {
	ms := func(v float64) string { return svgchart.Number(v) + " ms" }
	panel := func(title string, ping, query []float64) *svgchart.BarChart {
		return &svgchart.BarChart{Title: title, Width: 420, Categories: []string{"100", "1000"}, Notes: []string{"1 thr", ""},
			X: svgchart.Axis{Label: "packets/s"}, Y: svgchart.Axis{Label: "latency", Scale: svgchart.Log10, Format: ms}, Values: true,
			Series: []svgchart.BarSeries{{Name: "Ping", Values: ping, Titles: []string{"a <b>"}}, {Name: "Query", Values: query}}}
	}
	f := &svgchart.Figure{Title: "Fig. 41", Panels: []svgchart.Panel{
		panel("(a)", []float64{3, 20000}, []float64{25, 21000}),
		panel("(b)", []float64{0.5, 40}, []float64{21, math.NaN()}),
	}}
	es := svgtest.Parse(t, render(t, f))
	bars := svgtest.Series(es, "rect")
	if len(bars["Ping"]) != 4 || len(bars["Query"]) != 3 {
		t.Fatalf("bars: Ping %d, Query %d; want 4 and 3 (NaN draws none)", len(bars["Ping"]), len(bars["Query"]))
	}
	nested := 0
	for _, e := range es {
		if e.Name == "svg" && e.Depth == 1 {
			nested++
		}
	}
	if nested != 2 {
		t.Errorf("%d panels, want 2", nested)
	}
	all := svgtest.Texts(es)
	for _, want := range []string{"Fig. 41", "(a)", "(b)", "packets/s", "1 thr", "3 ms", "20k ms", "a <b>", "1 ms", "10 ms", "100 ms"} {
		if !slices.Contains(all, want) && !slices.ContainsFunc(es, func(e svgtest.Elem) bool { return e.Name == "title" && e.Text == want }) {
			t.Errorf("no text %q in %q", want, all)
		}
	}
	for _, b := range bars["Ping"] {
		if h, _ := strconv.ParseFloat(b.Attr["height"], 64); h < 0 {
			t.Errorf("negative bar height %v", b.Attr)
		}
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.svg")
	c := &svgchart.Chart{Title: "x", Series: []svgchart.Series{{Name: "a", Points: []svgchart.Point{{0, 1}, {1, 2}}}}}
	if err := c.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svgtest.Parse(t, data)
	if err := c.WriteFile(filepath.Join(t.TempDir(), "no", "such", "dir.svg")); err == nil {
		t.Error("WriteFile into a missing folder succeeded")
	}
}

func TestNumber(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {16, "16"}, {2.5, "2.5"}, {0.05, "0.05"}, {0.125, "0.125"}, {1000, "1000"},
		{12000, "12k"}, {1.5e6, "1.5M"}, {2e9, "2G"}, {-25000, "-25k"},
	} {
		if got := svgchart.Number(tc.v); got != tc.want {
			t.Errorf("Number(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func ExampleChart() {
	c := &svgchart.Chart{
		Title: "Throughput",
		X:     svgchart.Axis{Label: "clients", Scale: svgchart.Log2},
		Y:     svgchart.Axis{Label: "requests/s"},
		Series: []svgchart.Series{
			{Name: "haboob", Marks: true, Points: []svgchart.Point{{1, 900}, {16, 8000}, {256, 9000}}},
		},
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		panic(err)
	}
	fmt.Println(strings.Count(b.String(), "<polyline"), strings.Count(b.String(), "<circle"))
	// Output: 1 3
}
