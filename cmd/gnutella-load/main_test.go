package main

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/svgchart/svgtest"
)

// A short run against the router started in-process: every forward
// arrives (TTL 2, four peers: three forwards per descriptor), and no Query
// is faster than the router's delay for it.
func TestRunLoad(t *testing.T) {
	const delay = 5 * time.Millisecond
	r, err := startRouter(delay, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.stop(); err != nil {
			t.Error(err)
		}
	}()
	res, err := runLoad(context.Background(), loadConfig{Addr: r.node.Addr().String(), Peers: 4, Rate: 400,
		Duration: 500 * time.Millisecond, Queries: 0.15, TTL: 2, Drain: 30 * time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.Sent[0]+res.Sent[1] != 200 || res.Sent[1] == 0 {
		t.Fatalf("sent %v", res.Sent)
	}
	if res.Received != res.Expected {
		t.Fatalf("received %v of %v", res.Received, res.Expected)
	}
	if res.MeanMS[iQuery] < float64(delay/time.Millisecond) {
		t.Fatalf("query mean %.2f ms below the delay", res.MeanMS[iQuery])
	}
}

func TestFig41Output(t *testing.T) {
	pts := []fig41Point{
		{controller: false, res: result{Rate: 100, MeanMS: [2]float64{3, 25}}, threads: 1},
		{controller: false, res: result{Rate: 1000, MeanMS: [2]float64{20000, 21000}}, threads: 1},
		{controller: true, res: result{Rate: 100, MeanMS: [2]float64{0.5, 21}}, threads: 1},
		{controller: true, res: result{Rate: 1000, MeanMS: [2]float64{40, 60}}, threads: 3},
	}
	svg := fig41SVG(pts, []float64{100, 1000})
	es := svgtest.Parse(t, []byte(svg))
	bars := svgtest.Series(es, "rect")
	for _, name := range []string{"Ping", "Query"} {
		if n := len(bars[name]); n != 4 {
			t.Errorf("%d %s bars, want 4 (2 panels × 2 rates)", n, name)
		}
	}
	texts := svgtest.Texts(es)
	for _, text := range []string{"(a) one routing thread", "(b) thread-pool controller", "3 thr", "packets/s", "1.0 ms", "20 s"} {
		if !slices.Contains(texts, text) {
			t.Errorf("no text %q in the figure", text)
		}
	}
	tbl := fig41Table(pts, loadConfig{Peers: 4, Duration: time.Second, Queries: 0.15, TTL: 2}, 20*time.Millisecond)
	if strings.Count(tbl, "\n| ") != 4 {
		t.Fatalf("table:\n%s", tbl)
	}
}

func TestFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-peers", "1"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d", code)
	}
	if code := run([]string{"-experiment", "nope", "-o", filepath.Join(t.TempDir(), "x")}, &out, &errb); code != 2 {
		t.Fatalf("exit %d", code)
	}
}
