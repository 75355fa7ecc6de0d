package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !strings.HasPrefix(s, "<svg") || strings.Count(s, "<polyline") != 2 || !strings.Contains(s, "t &lt;1&gt;") || !strings.Contains(s, ">16</text>") {
		t.Errorf("chart:\n%s", s)
	}
}
