package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/svgchart"
)

type fig41Point struct {
	controller bool
	res        result
	threads    int
	dropped    uint64
}

func fig41(ctx context.Context, cfg loadConfig, rateList string, delay time.Duration, dir string, stdout io.Writer) error {
	var rates []float64
	for _, s := range strings.Split(rateList, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("bad rate %q", s)
		}
		rates = append(rates, v)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var pts []fig41Point
	for _, controller := range []bool{false, true} {
		for _, rate := range rates {
			r, err := startRouter(delay, controller, nil)
			if err != nil {
				return err
			}
			c := cfg
			c.Addr, c.Rate = r.node.Addr().String(), rate
			done := make(chan struct{})
			most := watchPool(r.m, done)
			res, err := runLoad(ctx, c)
			close(done)
			pt := fig41Point{controller: controller, res: res, threads: <-most, dropped: r.node.Stats().Dropped}
			if e := r.stop(); e != nil {
				// An overloaded router still holds a backlog that its
				// shutdown cannot drain in time: the measurement stands.
				fmt.Fprintf(stdout, "router shutdown: %v\n", e)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "controller=%v threads≤%d: %s\n", controller, pt.threads, res)
			pts = append(pts, pt)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "gnutella-fig41.md"), []byte(fig41Table(pts, cfg, delay)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "gnutella-fig41.svg"), []byte(fig41SVG(pts, rates)), 0o644)
}

func fig41Table(pts []fig41Point, cfg loadConfig, delay time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| controller | packets/s | Ping mean (ms) | Query mean (ms) | Ping p90 | Query p90 | forwards received | router threads (max) |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range pts {
		r := p.res
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %d / %d | %d |\n", map[bool]string{false: "off (1 thread)", true: "on"}[p.controller],
			r.Rate, r.MeanMS[iPing], r.MeanMS[iQuery], r.P90MS[iPing], r.P90MS[iQuery],
			r.Received[0]+r.Received[1], r.Expected[0]+r.Expected[1], p.threads)
	}
	fmt.Fprintf(&b, "\nMade by `go run ./cmd/gnutella-load %s`.\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "\n%d peers, %v of sending per point (then up to %v to drain), %.0f %% Queries, %v delay per Query, TTL %d.\n",
		cfg.Peers, cfg.Duration, cfg.Drain, cfg.Queries*100, delay, cfg.TTL)
	return b.String()
}

// fig41SVG draws the two panels of Fig. 41 as grouped bars (Ping, Query)
// per rate on a logarithmic latency axis, each bar labelled with its value.
func fig41SVG(pts []fig41Point, rates []float64) string {
	maxV := 1.0
	for _, p := range pts {
		maxV = math.Max(maxV, math.Max(p.res.MeanMS[0], p.res.MeanMS[1]))
	}
	hi := math.Max(2, math.Ceil(math.Log10(maxV))) // 1 ms .. 10^hi ms
	f := &svgchart.Figure{Title: "Gnutella router latency (thesis Fig. 41): 85 % Ping, 15 % Query, 20 ms per Query"}
	for _, ctl := range []bool{false, true} {
		c := &svgchart.BarChart{Title: "(a) one routing thread", Width: 450, Height: 400, Values: true,
			X:      svgchart.Axis{Label: "packets/s"},
			Y:      svgchart.Axis{Label: "mean latency (log scale)", Scale: svgchart.Log10, Min: 1, Max: math.Pow(10, hi), Format: fmtMS},
			Series: []svgchart.BarSeries{{Name: "Ping", Color: "#4477aa"}, {Name: "Query", Color: "#ee6677"}}}
		if ctl {
			c.Title = "(b) thread-pool controller"
		}
		for _, rate := range rates {
			c.Categories = append(c.Categories, strconv.FormatFloat(rate, 'f', 0, 64))
			note, vals, title := "", [2]float64{math.NaN(), math.NaN()}, ""
			for k := range pts {
				if pts[k].controller == ctl && pts[k].res.Rate == rate {
					vals, title = pts[k].res.MeanMS, pts[k].res.String()
					if ctl {
						note = strconv.Itoa(pts[k].threads) + " thr"
					}
				}
			}
			c.Notes = append(c.Notes, note)
			for k := range c.Series {
				c.Series[k].Values = append(c.Series[k].Values, vals[k])
				c.Series[k].Titles = append(c.Series[k].Titles, title)
			}
		}
		f.Panels = append(f.Panels, c)
	}
	var b strings.Builder
	_, _ = f.WriteTo(&b) // a strings.Builder does not fail
	return b.String()
}

func fmtMS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.3g s", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f ms", v)
	default:
		return fmt.Sprintf("%.1f ms", v)
	}
}
