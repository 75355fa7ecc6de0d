package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSweep writes a cmd/loadgen -json file: two servers at 1, 4 and 16
// clients, the first 16-client run of "a" superseded by a second round.
func writeSweep(t *testing.T) string {
	t.Helper()
	lines := []string{
		`{"server":"a","clients":1,"mbps":1,"rps":10,"fairness":1,"cdf":[[0.1,0],[1,0.5],[10,1]]}`,
		`{"server":"b","clients":1,"mbps":2,"rps":20,"fairness":1,"cdf":[[0.2,0],[2,0.5],[20,1]]}`,
		`{"server":"a","clients":16,"mbps":0,"rps":0,"fairness":0,"cdf":[]}`,
		`{"server":"a","clients":4,"mbps":3,"rps":30,"fairness":0.9,"cdf":[[0.1,0],[1,0.5],[10,1]]}`,
		``,
		`{"server":"a","clients":16,"mbps":4,"rps":40,"fairness":0.8,"cdf":[[0.5,0],[5,0.5],[500,1]]}`,
		`{"server":"b","clients":16,"mbps":5,"rps":50,"fairness":0.7,"cdf":[[0.3,0],[3,0.5],[300,1]]}`,
	}
	path := filepath.Join(t.TempDir(), "sweep.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPlotBench(t *testing.T) {
	in := writeSweep(t)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-bench", "-cdf", "16,1", "-prefix", "x-", "-o", dir, in}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	names := []string{"x-throughput.svg", "x-requests.svg", "x-fairness.svg", "x-rt-cdf-16.svg", "x-rt-cdf-1.svg"}
	if got := strings.Fields(stdout.String()); len(got) != len(names) {
		t.Fatalf("wrote %v, want %v", got, names)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}

	// Throughput: a line per server, x ascending (clients sorted), the
	// superseded run replaced; on a log axis 1, 4, 16 are equally spaced.
	lines := readSVG(t, filepath.Join(dir, "x-throughput.svg"))
	if len(lines) != 2 || lines[0].series != "a" || lines[1].series != "b" {
		t.Fatalf("throughput lines %+v", lines)
	}
	a := lines[0].points
	if len(a) != 3 || len(lines[1].points) != 2 {
		t.Fatalf("points a %v b %v", a, lines[1].points)
	}
	if d1, d2 := a[1][0]-a[0][0], a[2][0]-a[1][0]; d1 <= 0 || math.Abs(d1-d2) > 0.2 {
		t.Fatalf("clients 1, 4, 16 not equally spaced on the log axis: %v", a)
	}
	if !(a[2][1] < a[1][1] && a[1][1] < a[0][1]) { // SVG y grows downwards: 8, 24, 32 Mbit/s
		t.Fatalf("throughput not increasing for a: %v", a)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "x-throughput.svg"))
	if n := strings.Count(string(svg), "<circle"); n != 5 {
		t.Fatalf("%d point marks, want 5", n)
	}
	for _, tick := range []string{">1<", ">4<", ">16<"} {
		if !strings.Contains(string(svg), tick) {
			t.Errorf("no x tick %s", tick)
		}
	}

	// The 16-client distribution: decades 0.1 .. 1000 ms.
	cdf := readSVG(t, filepath.Join(dir, "x-rt-cdf-16.svg"))
	if len(cdf) != 2 || len(cdf[0].points) != 3 {
		t.Fatalf("cdf lines %+v", cdf)
	}
	svg, _ = os.ReadFile(filepath.Join(dir, "x-rt-cdf-16.svg"))
	for _, tick := range []string{">0.1<", ">1<", ">10<", ">100<", ">1000<"} {
		if !strings.Contains(string(svg), tick) {
			t.Errorf("cdf: no x tick %s", tick)
		}
	}
}

func TestPlotBenchServerCPU(t *testing.T) {
	lines := []string{
		`{"server":"a","clients":1,"mbps":1,"rps":10,"fairness":1,"cdf":[],"serverCpuUsPerRequest":700}`,
		`{"server":"a","clients":64,"mbps":1,"rps":10,"fairness":1,"cdf":[],"serverCpuUsPerRequest":20}`,
		`{"server":"b","clients":1,"mbps":1,"rps":10,"fairness":1,"cdf":[]}`,
		`{"server":"b","clients":64,"mbps":1,"rps":10,"fairness":1,"cdf":[],"serverCpuUsPerRequest":10}`,
	}
	in := filepath.Join(t.TempDir(), "cpu.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-bench", "-cdf", "", "-prefix", "x-", "-o", dir, in}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "x-cpu.svg") {
		t.Fatalf("no CPU chart among %q", stdout.String())
	}
	// b's 1-client run has no measurement: one point, not a zero.
	cpu := readSVG(t, filepath.Join(dir, "x-cpu.svg"))
	if len(cpu) != 2 || len(cpu[0].points) != 2 || len(cpu[1].points) != 1 {
		t.Fatalf("cpu lines %+v", cpu)
	}
}

func TestPlotBenchErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(t.TempDir(), "in.jsonl")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := writeSweep(t)
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"missing file", []string{"-bench", filepath.Join(dir, "none.jsonl")}, 1, "no such file"},
		{"not JSON", []string{"-bench", write("time,a\n")}, 1, "in.jsonl:1"},
		{"no server", []string{"-bench", write(`{"clients":4}` + "\n")}, 1, "server name"},
		{"empty", []string{"-bench", write("\n")}, 1, "no runs"},
		{"bad -cdf", []string{"-bench", "-cdf", "x", good}, 2, "bad client count"},
		{"no such client count", []string{"-bench", "-cdf", "64", "-o", dir, good}, 1, "no run with 64 clients"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.msg)
			}
		})
	}
}
