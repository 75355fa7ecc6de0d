package profiler_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// checkHeaders verifies every "# columns" line against the data lines under
// it: column k holds the value named by the header, column k-1 its name.
func checkHeaders(t *testing.T, text string) (headers int) {
	t.Helper()
	var cols map[int]string
	for i, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if h, ok := strings.CutPrefix(line, "# columns "); ok {
			headers++
			cols = map[int]string{}
			for _, f := range strings.Fields(h) {
				k, name, _ := strings.Cut(f, ":")
				n, err := strconv.Atoi(k)
				if err != nil {
					t.Fatalf("line %d: bad column %q", i+1, f)
				}
				cols[n] = name
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if cols == nil {
			t.Fatalf("line %d: data before any header", i+1)
		}
		f := strings.Fields(line)
		if len(f) != 2*(len(cols)-1)+1 {
			t.Fatalf("line %d: %d fields for %d columns", i+1, len(f), len(cols))
		}
		for k, name := range cols {
			if k == 1 {
				continue
			}
			if f[k-2] != name {
				t.Fatalf("line %d: column %d is %q, header says %q", i+1, k, f[k-2], name)
			}
			if _, err := strconv.ParseFloat(f[k-1], 64); err != nil {
				t.Fatalf("line %d: column %d (%s) = %q is not a number", i+1, k, name, f[k-1])
			}
		}
	}
	return headers
}

// TestProfileLog runs the profiler with its files on and reads them back.
func TestProfileLog(t *testing.T) {
	dir := t.TempDir()
	cfg := profiler.Config{
		Enabled:  true,
		Interval: time.Hour, // only the samples this test takes
		File:     filepath.Join(dir, "profile.log"),
		Graph:    filepath.Join(dir, "graph.dot"),
	}
	m := stage.NewManager(stage.Options{})
	stages := pipeline(t, m, stage.StageConfig{}, "Recv", "Send")
	start(t, m)
	p := newProfiler(t, m, cfg)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		_ = stages[0].Sink().Enqueue(i)
	}
	p.Sample()
	// A stage created later changes the columns: a new header.
	pipeline(t, m, stage.StageConfig{}, "Late")
	p.Sample()
	stop(t, m)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); !errors.Is(err, profiler.ErrStopped) {
		t.Fatalf("second Shutdown: %v", err)
	}

	data, err := os.ReadFile(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "# sandstorm profile started ") {
		t.Fatalf("no title line:\n%.300s", data)
	}
	if h := checkHeaders(t, string(data)); h != 2 {
		t.Fatalf("%d header lines, want 2 (start, after Late appeared)", h)
	}
	recs, err := profiler.ReadLog(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 { // Start, 2 × Sample, Shutdown
		t.Fatalf("%d records, want 4", len(recs))
	}
	for i, r := range recs {
		want := []string{"Recv", "Send"}
		if i >= 2 {
			want = append(want, "Late")
		}
		for _, st := range want {
			for _, col := range []string{".queue.length", ".pool.size", ".rate.handled", ".enqueued", ".seen"} {
				if _, ok := r.Get(st + col); !ok {
					t.Errorf("record %d has no column %s%s", i, st, col)
				}
			}
		}
		if _, ok := r.Get("mem.heap"); !ok {
			t.Errorf("record %d has no memory column", i)
		}
	}
	if got, _ := recs[3].Get("Send.enqueued"); got != 100 {
		t.Errorf("last Send.enqueued = %v, want 100", got)
	}
	if got := profiler.StageNames(recs); strings.Join(got, ",") != "Recv,Send,Late" {
		t.Errorf("StageNames = %v", got)
	}
	if pts := profiler.Series(recs, "Late.queue.length"); len(pts) != 2 {
		t.Errorf("Late series has %d points, want 2", len(pts))
	}

	dot, err := os.ReadFile(cfg.Graph)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dot), `"Recv" -> "Send" [label="100"];`) {
		t.Fatalf("graph file lacks the Recv -> Send edge:\n%s", dot)
	}
	_, err = os.Stat(filepath.Join(dir, "graph.svg"))
	if profiler.DotPath() != "" && err != nil {
		t.Fatalf("dot is installed but no SVG was rendered: %v", err)
	}
	if profiler.DotPath() == "" && err == nil {
		t.Fatal("an SVG appeared without dot")
	}
}

// TestProfileLogAppends: a second run appends, with its own title and
// header.
func TestProfileLogAppends(t *testing.T) {
	dir := t.TempDir()
	cfg := profiler.Config{Enabled: true, Interval: time.Hour, File: filepath.Join(dir, "p.log"), Graph: filepath.Join(dir, "g.dot")}
	for run := 0; run < 2; run++ {
		m := stage.NewManager(stage.Options{})
		pipeline(t, m, stage.StageConfig{}, "A")
		p := newProfiler(t, m, cfg)
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(cfg.File)
	if n := strings.Count(string(data), "# sandstorm profile started"); n != 2 {
		t.Fatalf("%d runs in the log, want 2:\n%s", n, data)
	}
	recs, err := profiler.ReadLog(bytes.NewReader(data))
	if err != nil || len(recs) != 4 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
}

func TestStartFailures(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	p := newProfiler(t, m, profiler.Config{Enabled: true, File: filepath.Join(t.TempDir(), "no", "such", "dir", "p.log")})
	if err := p.Start(context.Background()); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Start with an unwritable log: %v", err)
	}
	busy := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0"})
	if err := busy.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if err := busy.Start(context.Background()); !errors.Is(err, profiler.ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	clash := newProfiler(t, m, profiler.Config{HTTP: busy.Addr().String()})
	if err := clash.Start(context.Background()); err == nil {
		t.Fatal("Start on a taken address succeeded")
	}
}

func TestLogWriterReadLogRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_767_366_245_123)
	s := profiler.Sample{
		Time:    at,
		Process: []profiler.Value{{Name: "mem.heap", Value: 1 << 20}},
		Stages: []profiler.StageSample{{Name: "My Stage", Values: []profiler.Value{
			{Name: "queue.length", Value: 3}, {Name: "rate.handled", Value: 12.5}, {Name: "predicate.p90", Value: math.NaN()},
			{Name: "predicate.rate", Value: math.Inf(1)}, {Name: "big", Value: 1e20}}}},
		Other: []profiler.Value{{Name: "x", Value: -2}},
	}
	var b bytes.Buffer
	w := profiler.NewLogWriter(&b)
	for i := 0; i < 3; i++ {
		if err := w.Write(&s, time.Second); err != nil {
			t.Fatal(err)
		}
		s.Time = s.Time.Add(time.Second)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if h := checkHeaders(t, b.String()); h != 1 {
		t.Fatalf("%d headers, want 1:\n%s", h, b.String())
	}
	recs, err := profiler.ReadLog(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || !recs[0].Time.Equal(at) || !recs[2].Time.Equal(at.Add(2*time.Second)) {
		t.Fatalf("records %+v", recs)
	}
	want := map[string]float64{"mem.heap": 1 << 20, "My_Stage.queue.length": 3, "My_Stage.rate.handled": 12.5,
		"My_Stage.predicate.rate": math.Inf(1), "My_Stage.big": 1e20, "x": -2}
	for name, v := range want {
		if got, ok := recs[1].Get(name); !ok || got != v {
			t.Errorf("%s = %v (%v), want %v", name, got, ok, v)
		}
	}
	if got, _ := recs[1].Get("My_Stage.predicate.p90"); !math.IsNaN(got) {
		t.Errorf("NaN came back as %v", got)
	}
}

func TestReadLogErrors(t *testing.T) {
	tests := []struct{ name, log, err string }{
		{"odd pairs", "# c\n1.0 a 1 b\n", "line 2: want a time then name/value pairs, got 4 fields"},
		{"bad time", "x a 1\n", `line 1: bad time "x"`},
		{"bad value", "\n1.5 a 1 b two\n", `line 2: b: bad value "two"`},
		{"negative time", "-1 a 1\n", `line 1: bad time "-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := profiler.ReadLog(strings.NewReader(tt.log))
			if !errors.Is(err, profiler.ErrBadLog) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("got %v, want ErrBadLog with %q", err, tt.err)
			}
		})
	}
}

func FuzzReadLog(f *testing.F) {
	f.Add("# columns 1:time 3:a\n1767366245.123 a 1\n")
	f.Add("1 a NaN b +Inf c -1e300\n")
	f.Add("0\n\n#\n")
	f.Fuzz(func(t *testing.T, log string) {
		recs, err := profiler.ReadLog(strings.NewReader(log))
		if err != nil {
			if !errors.Is(err, profiler.ErrBadLog) {
				t.Fatalf("error %v does not wrap ErrBadLog", err)
			}
			return
		}
		// What was read writes back to a log that reads the same.
		var b bytes.Buffer
		w := profiler.NewLogWriter(&b)
		for _, r := range recs {
			if err := w.Write(&profiler.Sample{Time: r.Time, Other: r.Values}, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		_ = w.Flush()
		again, err := profiler.ReadLog(&b)
		if err != nil {
			t.Fatalf("rewritten log does not parse: %v\n%s", err, b.String())
		}
		if len(again) != len(recs) {
			t.Fatalf("%d records, then %d", len(recs), len(again))
		}
		for i := range recs {
			if !again[i].Time.Equal(recs[i].Time) || len(again[i].Values) != len(recs[i].Values) {
				t.Fatalf("record %d changed: %+v -> %+v", i, recs[i], again[i])
			}
		}
	})
}
