package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi/load"
	"github.com/sandstorm-go/sandstorm/internal/svgchart/svgtest"
)

func TestBadArguments(t *testing.T) {
	var out, errs bytes.Buffer
	if got := run([]string{"-experiment", "nope"}, &out, &errs); got != 1 || !strings.Contains(errs.String(), "unknown experiment") {
		t.Errorf("unknown experiment: %d %q", got, errs.String())
	}
	if got := run([]string{"-experiment", "sweep", "-points", "1,x", "-o", t.TempDir()}, &out, &errs); got != 1 {
		t.Errorf("bad -points: %d", got)
	}
}

func TestChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.svg")
	c := chart{title: "t <1>", xlabel: "users", ylabel: "ms", logx: true, ref: 250, refLabel: "target",
		lines: []series{{name: "a", x: []float64{1, 4, 16}, y: []float64{10, 300, 200}}, {name: "b", x: []float64{1, 16}, y: []float64{5, 6}, dashed: true}}}
	if err := c.write(path); err != nil {
		t.Fatal(err)
	}
	es := svgtest.ParseFile(t, path)
	lines, marks := svgtest.Series(es, "polyline"), svgtest.Series(es, "circle")
	if len(lines) != 2 || len(lines["a"]) != 1 || len(lines["b"]) != 1 || len(marks["a"]) != 3 || len(marks["b"]) != 2 {
		t.Errorf("lines %v, marks %v; want a and b, with 3 and 2 marks", lines, marks)
	}
	texts := svgtest.Texts(es)
	for _, want := range []string{"t <1>", "users", "ms", "target", "1", "2", "4", "8", "16"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
}

func TestTypeCharts(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if got := run([]string{"-experiment", "types", "-o", dir}, &out, &errs); got != 1 {
		t.Errorf("types without arashi-sweep.json: %d", got)
	}
	json := `[{"users":16,"control":false,"type_p90_ms":{"login":10,"list":20},"type_requests":{"login":5,"list":7}},
{"users":1024,"control":false,"type_p90_ms":{"login":30,"list":40},"type_requests":{"login":5,"list":7}},
{"users":16,"control":true,"type_p90_ms":{"login":10},"type_requests":{"login":5}},
{"users":1024,"control":true,"type_p90_ms":{"login":300},"type_requests":{"login":5}}]`
	if err := os.WriteFile(filepath.Join(dir, "arashi-sweep.json"), []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := run([]string{"-experiment", "types", "-o", dir}, &out, &errs); got != 0 {
		t.Fatalf("types: %d %s", got, errs.String())
	}
	for file, lines := range map[string]int{"arashi-fig48-p90.svg": 2, "arashi-fig54-p90.svg": 1} {
		if n := len(svgtest.Series(svgtest.ParseFile(t, filepath.Join(dir, file)), "polyline")); n != lines {
			t.Errorf("%s: %d series, want %d", file, n, lines)
		}
	}
}

func TestSplitNeedsInProcessService(t *testing.T) {
	var out, errs bytes.Buffer
	if got := run([]string{"-split", "-addr", "127.0.0.1:1"}, &out, &errs); got != 1 || !strings.Contains(errs.String(), "-split") {
		t.Errorf("-split with -addr: %d %q", got, errs.String())
	}
}

func TestBadDegrade(t *testing.T) {
	var out, errs bytes.Buffer
	if got := run([]string{"-degrade", "half"}, &out, &errs); got != 2 || !strings.Contains(errs.String(), "degradation mode") {
		t.Errorf("-degrade half: %d %q", got, errs.String())
	}
}

func TestOverTime(t *testing.T) {
	samples := []load.Sample{
		{At: 500 * time.Millisecond, Status: 200, Latency: 10 * time.Millisecond},
		{At: 600 * time.Millisecond, Status: 503, Latency: time.Millisecond},
		{At: 2500 * time.Millisecond, Status: 200, Latency: 30 * time.Millisecond, Class: 1},
	}
	for _, tc := range []struct {
		name        string
		window      func(from, to time.Duration) func(load.Sample) bool
		x, p90, rej []float64
	}{
		{"all", load.Window, []float64{0.5, 2.5}, []float64{10, 30}, []float64{50, 0}},
		{"class 1", func(from, to time.Duration) func(load.Sample) bool { return load.OfClass(1, from, to) }, []float64{2.5}, []float64{30}, []float64{0}},
	} {
		var p, r series
		overTime(&p, &r, samples, 3*time.Second, time.Second, tc.window)
		if !slices.Equal(p.x, tc.x) || !slices.Equal(r.x, tc.x) || !slices.Equal(p.y, tc.p90) || !slices.Equal(r.y, tc.rej) {
			t.Errorf("%s: p90 %v %v, rejected %v %v; want x %v, p90 %v, rejected %v", tc.name, p.x, p.y, r.x, r.y, tc.x, tc.p90, tc.rej)
		}
	}
}
