package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/svgchart/svgtest"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// writeLog writes a synthetic profile: stage A's queue ramps up by 10 per
// sample while its threads step up every 5 samples; stage B appears at
// sample 5.
func writeLog(t *testing.T, n int) string {
	t.Helper()
	var b bytes.Buffer
	w := profiler.NewLogWriter(&b)
	at := time.Unix(1_700_000_000, 0)
	for i := 0; i < n; i++ {
		s := profiler.Sample{
			Time:    at.Add(time.Duration(i) * time.Second),
			Process: []profiler.Value{{Name: "mem.heap", Value: 1e6}},
			Stages: []profiler.StageSample{{Name: "A", Values: []profiler.Value{
				{Name: "pool.size", Value: float64(1 + i/5)},
				{Name: "queue.length", Value: float64(10 * i)},
				{Name: "rate.handled", Value: 100},
				{Name: "rate.rejected", Value: math.NaN()},
			}}},
		}
		if i >= 5 {
			s.Stages = append(s.Stages, profiler.StageSample{Name: "B", Values: []profiler.Value{
				{Name: "pool.size", Value: 2}, {Name: "queue.length", Value: 1},
				{Name: "rate.handled", Value: 50}, {Name: "rate.rejected", Value: 5},
			}})
		}
		if err := w.Write(&s, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "profile.log")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type line struct {
	series string
	points [][2]float64
}

// readSVG parses an SVG file and returns its polylines.
func readSVG(t *testing.T, path string) []line {
	t.Helper()
	var lines []line
	for _, e := range svgtest.ParseFile(t, path) {
		if e.Name == "polyline" {
			lines = append(lines, line{series: e.Attr["data-series"], points: svgtest.Points(t, e)})
		}
	}
	return lines
}

func TestPlot(t *testing.T) {
	log := writeLog(t, 20)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-o", dir, log}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := []string{"queue-length.svg", "pool-size.svg", "rate-handled.svg", "rate-rejected.svg", "stage-A.svg", "stage-B.svg"}
	var got []string
	for _, f := range strings.Fields(stdout.String()) {
		got = append(got, filepath.Base(f))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("wrote %v, want %v", got, want)
	}

	tests := []struct {
		file   string
		series map[string]int // points per series (a step chart doubles them)
	}{
		{"queue-length.svg", map[string]int{"A": 20, "B": 15}},
		{"pool-size.svg", map[string]int{"A": 39, "B": 29}},
		{"rate-handled.svg", map[string]int{"A": 20, "B": 15}},
		{"rate-rejected.svg", map[string]int{"B": 15}}, // A's NaNs are left out
		{"stage-A.svg", map[string]int{"queue length": 20, "threads": 39}},
		{"stage-B.svg", map[string]int{"queue length": 15, "threads": 29}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			lines := readSVG(t, filepath.Join(dir, tt.file))
			if len(lines) != len(tt.series) {
				t.Fatalf("%d lines, want %d: %+v", len(lines), len(tt.series), lines)
			}
			for _, l := range lines {
				if n, ok := tt.series[l.series]; !ok || len(l.points) != n {
					t.Errorf("line %q has %d points, want %d", l.series, len(l.points), n)
				}
			}
		})
	}
	// A's queue ramps up: its line climbs (SVG y grows downwards) and time
	// runs left to right.
	for _, l := range readSVG(t, filepath.Join(dir, "queue-length.svg")) {
		if l.series != "A" {
			continue
		}
		for i := 1; i < len(l.points); i++ {
			if !(l.points[i][0] > l.points[i-1][0] && l.points[i][1] < l.points[i-1][1]) {
				t.Fatalf("point %d %v does not follow %v", i, l.points[i], l.points[i-1])
			}
		}
	}
}

func TestPlotSelection(t *testing.T) {
	log := writeLog(t, 8)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"-o", dir, "-stages", "B", "-metrics", "rate.handled", "-per-stage=false", log}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != filepath.Join(dir, "rate-handled.svg") {
		t.Fatalf("wrote %q", got)
	}
	lines := readSVG(t, filepath.Join(dir, "rate-handled.svg"))
	if len(lines) != 1 || lines[0].series != "B" || len(lines[0].points) != 3 {
		t.Fatalf("lines %+v", lines)
	}
}

func TestPlotErrors(t *testing.T) {
	good := writeLog(t, 3)
	bad := filepath.Join(t.TempDir(), "bad.log")
	if err := os.WriteFile(bad, []byte("# x\n1 a 1\n2 a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.log")
	if err := os.WriteFile(empty, []byte("# nothing yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no file", nil, 2, "usage: sandstorm-plot"},
		{"missing", []string{"/no/such/profile.log"}, 1, "no such file"},
		{"malformed", []string{bad}, 1, "bad.log: profiler: malformed profile log: line 3"},
		{"empty", []string{empty}, 1, "empty.log: no samples"},
		{"unknown stage", []string{"-stages", "Z", good}, 1, `no stage "Z" (stages: A)`},
		{"unknown metric", []string{"-metrics", "nope", good}, 1, `no stage has a "nope" column`},
		{"tiny", []string{"-width", "10", good}, 2, "-width must be"},
		{"bad flag", []string{"-bogus", good}, 2, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"-o", t.TempDir()}, tt.args...)
			if code := run(args, &stdout, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.msg)
			}
		})
	}
}

// TestPlotRealProfile plots a log written by a running profiler.
func TestPlotRealProfile(t *testing.T) {
	dir := t.TempDir()
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("Echo", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := profiler.New(m, profiler.Config{Enabled: true, Interval: time.Hour,
		File: filepath.Join(dir, "p.log"), Graph: filepath.Join(dir, "g.dot")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		_ = st.Sink().Enqueue(i)
		p.Sample()
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-o", dir, filepath.Join(dir, "p.log")}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// Start + 10 + Shutdown = 12 samples per series. A line breaks where
	// samples are far apart for the log (a busy machine may pause between
	// them), so count samples over the runs: a run of k samples has k
	// points, or 2k-1 drawn as steps (threads).
	samples := map[string]int{}
	for _, l := range readSVG(t, filepath.Join(dir, "stage-Echo.svg")) {
		n := len(l.points)
		if l.series == "threads" {
			n = (n + 1) / 2
		}
		samples[l.series] += n
	}
	if samples["queue length"] != 12 || samples["threads"] != 12 || len(samples) != 2 {
		t.Fatalf("samples per series %v, want 12 of queue length and of threads", samples)
	}
}
