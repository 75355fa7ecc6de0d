package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"

	"github.com/sandstorm-go/sandstorm/internal/svgchart"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// metricInfo describes how to chart a per-stage metric.
type metricInfo struct {
	title, unit string
	step        bool // a level that holds between samples
}

var known = map[string]metricInfo{
	"queue.length":       {"Queue length", "events", false},
	"pool.size":          {"Threads", "threads", true},
	"rate.handled":       {"Throughput", "events/s", false},
	"rate.enqueued":      {"Arrival rate", "events/s", false},
	"rate.rejected":      {"Rejections", "events/s", false},
	"batching.factor":    {"Batching factor", "events/batch", true},
	"service.ns.p90":     {"Service time p90", "ns", false},
	"queue.wait.ns.p90":  {"Queue wait p90", "ns", false},
	"predicate.rate":     {"Admission rate", "events/s", false},
	"predicate.p90":      {"Response time p90 (admission controller)", "s", false},
	"rejected.predicate": {"Rejected by the predicate (total)", "events", false},
}

const defaultMetrics = "queue.length,pool.size,rate.handled,rate.rejected"

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandstorm-plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", ".", "directory to write the SVG files to")
	stagesFlag := fs.String("stages", "", "comma-separated stages to plot (default: all)")
	metricsFlag := fs.String("metrics", defaultMetrics, "comma-separated per-stage metrics, one chart each")
	perStage := fs.Bool("per-stage", true, "also write one chart per stage: queue length and threads (Fig. 30)")
	width := fs.Int("width", 900, "chart width in pixels")
	height := fs.Int("height", 360, "chart height in pixels")
	bench := fs.Bool("bench", false, "the file is a cmd/loadgen -json sweep: plot throughput, fairness and response times against clients")
	prefix := fs.String("prefix", "bench-", "with -bench: file name prefix of the charts")
	cdfFlag := fs.String("cdf", "", "with -bench: comma-separated client counts to chart the response-time distribution of")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sandstorm-plot [flags] profile.log\n       sandstorm-plot -bench [-cdf 64,1024] [flags] loadgen.jsonl\n\nWrites SVG charts of a Sandstorm profile log or of a cmd/loadgen sweep.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if *width < 200 || *height < 150 {
		fmt.Fprintln(stderr, "sandstorm-plot: -width must be ≥ 200 and -height ≥ 150")
		return 2
	}
	o := options{
		dir: *out, stages: splitList(*stagesFlag), metrics: splitList(*metricsFlag),
		perStage: *perStage, width: *width, height: *height,
	}
	var files []string
	var err error
	if *bench {
		var cdf []int
		for _, f := range splitList(*cdfFlag) {
			n, perr := strconv.Atoi(f)
			if perr != nil || n <= 0 {
				fmt.Fprintf(stderr, "sandstorm-plot: -cdf: bad client count %q\n", f)
				return 2
			}
			cdf = append(cdf, n)
		}
		files, err = plotBench(fs.Arg(0), o, *prefix, cdf)
	} else {
		files, err = plot(fs.Arg(0), o)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sandstorm-plot:", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return 0
}

type options struct {
	dir           string
	stages        []string
	metrics       []string
	perStage      bool
	width, height int
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// plot reads the log and writes the charts, returning their paths.
func plot(path string, o options) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	recs, err := profiler.ReadLog(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	all := profiler.StageNames(recs)
	stages := all
	if len(o.stages) > 0 {
		for _, s := range o.stages {
			if !slices.Contains(all, s) {
				return nil, fmt.Errorf("%s: no stage %q (stages: %s)", path, s, strings.Join(all, ", "))
			}
		}
		stages = o.stages
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%s: no stages (no *.queue.length columns)", path)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	t0 := recs[0].Time
	gap := gapLimit(recs)
	color := map[string]string{}
	for i, s := range all {
		color[s] = svgchart.Color(i)
	}
	xlabel := "time (s) since " + t0.UTC().Format(time.RFC3339)

	files := &chartFiles{dir: o.dir}

	for _, metric := range o.metrics {
		info, ok := known[metric]
		if !ok {
			info = metricInfo{title: metric, unit: metric}
		}
		c := &svgchart.Chart{Title: info.title + " per stage", X: svgchart.Axis{Label: xlabel}, Y: svgchart.Axis{Label: info.unit},
			Width: o.width, Height: o.height}
		found := false
		for _, s := range stages {
			segs := segments(recs, s+"."+metric, t0, gap)
			found = found || len(segs) > 0
			c.Series = append(c.Series, svgchart.Series{Name: s, Color: color[s], Step: info.step, Segments: segs})
		}
		if !found {
			return nil, fmt.Errorf("%s: no stage has a %q column", path, metric)
		}
		if err := files.write(fileName(metric)+".svg", c); err != nil {
			return nil, err
		}
	}
	if o.perStage {
		for _, s := range stages {
			c := &svgchart.Chart{Title: s + ": queue length and threads", X: svgchart.Axis{Label: xlabel},
				Y: svgchart.Axis{Label: "queue length (events)"}, Y2: svgchart.Axis{Label: "threads"}, Width: o.width, Height: o.height}
			c.Series = []svgchart.Series{
				{Name: "queue length", Color: "#2f6fdb", Segments: segments(recs, s+".queue.length", t0, gap)},
				{Name: "threads", Color: "#d9480f", Right: true, Step: true, Segments: segments(recs, s+".pool.size", t0, gap)},
			}
			if err := files.write("stage-"+fileName(s)+".svg", c); err != nil {
				return nil, err
			}
		}
	}
	return files.written, nil
}

// gapLimit is the time between samples beyond which lines are broken:
// ten times the median sampling interval.
func gapLimit(recs []profiler.Record) time.Duration {
	var d []time.Duration
	for i := 1; i < len(recs); i++ {
		if dt := recs[i].Time.Sub(recs[i-1].Time); dt > 0 {
			d = append(d, dt)
		}
	}
	if len(d) == 0 {
		return time.Duration(1<<63 - 1)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return 10 * d[len(d)/2]
}

// segments returns the points of column name as runs: a record without
// the column, a step back in time (a restarted run appended to the log) or
// a gap longer than gap ends a run. Non-finite values are left out.
func segments(recs []profiler.Record, name string, t0 time.Time, gap time.Duration) [][]svgchart.Point {
	var out [][]svgchart.Point
	var cur []svgchart.Point
	var last time.Time
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
			cur = nil
		}
	}
	for _, r := range recs {
		v, ok := r.Get(name)
		if !ok || r.Time.Before(last) || (len(cur) > 0 && r.Time.Sub(last) > gap) {
			flush()
		}
		last = r.Time
		if ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			cur = append(cur, svgchart.Point{X: r.Time.Sub(t0).Seconds(), Y: v})
		}
	}
	flush()
	return out
}

// fileName makes a safe file name from a metric or stage name.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, s)
}
