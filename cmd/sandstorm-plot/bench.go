package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/sandstorm-go/sandstorm/internal/svgchart"
)

// benchRun is the part of a cmd/loadgen -json line that the charts use.
type benchRun struct {
	Server   string       `json:"server"`
	Clients  int          `json:"clients"`
	MBps     float64      `json:"mbps"`
	RPS      float64      `json:"rps"`
	Fairness float64      `json:"fairness"`
	CDF      [][2]float64 `json:"cdf"`
	// ServerCPU is the server's CPU µs per request (loadgen -server-pids;
	// 0 when not measured).
	ServerCPU float64 `json:"serverCpuUsPerRequest"`
}

// readBench reads a cmd/loadgen -json file. When a server and client
// count appear more than once (a second round appended to the file), the
// last run counts.
func readBench(path string) ([]benchRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []benchRun
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r benchRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if r.Server == "" || r.Clients <= 0 {
			return nil, fmt.Errorf("%s:%d: a run needs a server name and a positive client count", path, n)
		}
		if i := slices.IndexFunc(runs, func(o benchRun) bool { return o.Server == r.Server && o.Clients == r.Clients }); i >= 0 {
			runs[i] = r
		} else {
			runs = append(runs, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: no runs", path)
	}
	return runs, nil
}

// plotBench writes the charts of a load sweep (the thesis's Figs. 37, 38
// and 40): throughput and Jain fairness against the number of clients, a
// line per server, and for each client count in cdfClients the
// cumulative response-time distribution, log-scale time axis. When the
// runs carry the server's CPU time per request, a chart of it too.
func plotBench(path string, o options, prefix string, cdfClients []int) ([]string, error) {
	runs, err := readBench(path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	var servers []string
	var clients []float64
	for _, r := range runs {
		if !slices.Contains(servers, r.Server) {
			servers = append(servers, r.Server)
		}
		if !slices.Contains(clients, float64(r.Clients)) {
			clients = append(clients, float64(r.Clients))
		}
	}
	slices.Sort(clients)

	// perServer returns a series per server of y(run) against clients,
	// leaving out the runs where keep(run) is false.
	perServer := func(y func(benchRun) float64, keep func(benchRun) bool) []svgchart.Series {
		var out []svgchart.Series
		for i, s := range servers {
			var pts []svgchart.Point
			for _, r := range runs {
				if r.Server == s && keep(r) {
					pts = append(pts, svgchart.Point{X: float64(r.Clients), Y: y(r)})
				}
			}
			slices.SortFunc(pts, func(a, b svgchart.Point) int { return cmp.Compare(a.X, b.X) })
			out = append(out, svgchart.Series{Name: s, Color: svgchart.Color(i), Marks: true, Points: pts})
		}
		return out
	}
	all := func(benchRun) bool { return true }
	files := &chartFiles{dir: o.dir}
	xl := svgchart.Axis{Label: "clients (log scale)", Scale: svgchart.Log10, Ticks: clients}
	charts := []struct {
		name string
		c    *svgchart.Chart
	}{
		{"throughput", &svgchart.Chart{Title: "Throughput", X: xl, Y: svgchart.Axis{Label: "Mbit/s (response bodies)"},
			Series: perServer(func(r benchRun) float64 { return r.MBps * 8 }, all)}},
		{"requests", &svgchart.Chart{Title: "Requests per second", X: xl, Y: svgchart.Axis{Label: "requests/s"},
			Series: perServer(func(r benchRun) float64 { return r.RPS }, all)}},
		{"fairness", &svgchart.Chart{Title: "Jain fairness index over the clients' completed requests", X: xl, Y: svgchart.Axis{Label: "fairness"},
			Series: perServer(func(r benchRun) float64 { return r.Fairness }, all)}},
	}
	measured := func(r benchRun) bool { return r.ServerCPU > 0 }
	if slices.ContainsFunc(runs, measured) {
		charts = append(charts, struct {
			name string
			c    *svgchart.Chart
		}{"cpu", &svgchart.Chart{Title: "Server CPU time per request", X: xl,
			Y:      svgchart.Axis{Label: "CPU µs per request (log scale)", Scale: svgchart.Log10},
			Series: perServer(func(r benchRun) float64 { return r.ServerCPU }, measured)}})
	}
	for _, ch := range charts {
		ch.c.Width, ch.c.Height = o.width, o.height
		if err := files.write(prefix+ch.name+".svg", ch.c); err != nil {
			return nil, err
		}
	}
	for _, n := range cdfClients {
		c := &svgchart.Chart{Title: fmt.Sprintf("Response time distribution, %d clients", n),
			X: svgchart.Axis{Label: "response time (ms, log scale)", Scale: svgchart.Log10}, Y: svgchart.Axis{Label: "fraction of requests"},
			Width: o.width, Height: o.height}
		for i, s := range servers {
			j := slices.IndexFunc(runs, func(r benchRun) bool { return r.Server == s && r.Clients == n })
			if j < 0 {
				continue
			}
			var pts []svgchart.Point
			for _, p := range runs[j].CDF {
				if !math.IsNaN(p[0]) && !math.IsNaN(p[1]) {
					pts = append(pts, svgchart.Point{X: p[0], Y: p[1]})
				}
			}
			c.Series = append(c.Series, svgchart.Series{Name: s, Color: svgchart.Color(i), Points: pts})
		}
		if len(c.Series) == 0 {
			return nil, fmt.Errorf("%s: no run with %d clients", path, n)
		}
		if err := files.write(prefix+"rt-cdf-"+strconv.Itoa(n)+".svg", c); err != nil {
			return nil, err
		}
	}
	return files.written, nil
}
