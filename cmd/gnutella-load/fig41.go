package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	const W, H, top, bottom, left, gap = 900, 420, 50, 60, 70, 40
	panelW := (W - left - gap - 20) / 2
	maxV := 1.0
	for _, p := range pts {
		maxV = math.Max(maxV, math.Max(p.res.MeanMS[0], p.res.MeanMS[1]))
	}
	lo, hi := 0.0, math.Ceil(math.Log10(maxV)) // 1 ms .. 10^hi ms
	if hi < 2 {
		hi = 2
	}
	y := func(v float64) float64 {
		if v < 1 {
			v = 1
		}
		return float64(H-bottom) - (math.Log10(v)-lo)/(hi-lo)*float64(H-top-bottom)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15">Gnutella router latency (thesis Fig. 41): 85 %% Ping, 15 %% Query, 20 ms per Query</text>`+"\n", left)
	colors := [2]string{"#4477aa", "#ee6677"}
	for panel, ctl := range []bool{false, true} {
		x0 := left + panel*(panelW+gap)
		title := "(a) one routing thread"
		if ctl {
			title = "(b) thread-pool controller"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13">%s</text>`+"\n", x0, top-12, title)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, top, x0, H-bottom)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, H-bottom, x0+panelW, H-bottom)
		for e := lo; e <= hi; e++ {
			yy := y(math.Pow(10, e))
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0, yy, x0+panelW, yy)
			if panel == 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, yy+4, fmtMS(math.Pow(10, e)))
			}
		}
		slot := float64(panelW) / float64(len(rates))
		for i, rate := range rates {
			var pt *fig41Point
			for k := range pts {
				if pts[k].controller == ctl && pts[k].res.Rate == rate {
					pt = &pts[k]
				}
			}
			cx := float64(x0) + slot*(float64(i)+0.5)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n", cx, H-bottom+16, rate)
			if pt == nil {
				continue
			}
			if ctl {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%d thr</text>`+"\n", cx, H-bottom+30, pt.threads)
			}
			bw := slot * 0.35
			for k := 0; k < 2; k++ {
				v := pt.res.MeanMS[k]
				bx := cx - bw + float64(k)*bw
				yy := y(v)
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
					bx, yy, bw-2, float64(H-bottom)-yy, colors[k], html.EscapeString(pt.res.String()))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", bx+bw/2-1, yy-3, fmtMS(v))
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">packets/s</text>`+"\n", x0+panelW/2, H-bottom+46)
	}
	fmt.Fprintf(&b, `<text transform="translate(16,%d) rotate(-90)" text-anchor="middle">mean latency (log scale)</text>`+"\n", (H)/2)
	for k, name := range []string{"Ping", "Query"} {
		fmt.Fprintf(&b, `<rect x="%d" y="28" width="12" height="12" fill="%s"/><text x="%d" y="38">%s</text>`+"\n", W-170+k*80, colors[k], W-154+k*80, name)
	}
	b.WriteString("</svg>\n")
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
