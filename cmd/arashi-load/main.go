// Command arashi-load is the Arashi client load generator of the SEDA
// thesis (§6.3.4, package apps/arashi/load) and the driver of its experiments.
//
//	arashi-load [-addr HOST:PORT] [-users N] [-high N] [-duration D] [-warmup D] [-degrade MODE] [-split]
//	arashi-load -experiment sweep|classes|spike|degrade|types [-o DIR] [-points 1,4,16,...] [-duration D]
//
// Without -experiment it drives the service at -addr (default: an Arashi
// started in this process on a fresh database) with -users emulated users
// (the last -high of them in class 1, by the X-Class header) and prints,
// per request type, the requests, rejections and response times measured
// after the warm-up.
//
// -experiment sweep runs Arashi in this process at each user count of
// -points, without admission control and with the default per-type rt
// controllers, and writes docs/figures/arashi-fig47.svg (throughput and
// p90 against users, no control) and arashi-fig53.svg (p90 with and
// without control, and the fraction rejected), plus a Markdown table on
// standard output. -experiment classes runs the two-class experiment of
// Figs. 58–59: 128 low-class users throughout, 128 high-class users in the
// middle third, once with one rt controller per stage for all (no
// differentiation) and once with multiclass controllers, and writes
// arashi-fig58.svg and arashi-fig59.svg. -experiment spike runs the load
// spike of Figs. 52 and 55: 3 users, then 1000 more in the middle third,
// with and without control, and writes the ListFolders controller's trace
// (arashi-fig52-*.svg) and the clients' p90 and rejections over time
// (arashi-fig55-*.svg). -experiment degrade runs the same spike without
// control, with service degradation alone and with degradation plus
// admission control (Figs. 56–57: arashi-fig56-*.svg, arashi-fig57-*.svg).
// A sweep also draws each request type's p90 (arashi-fig48-p90.svg,
// arashi-fig54-p90.svg); -experiment types redraws them from
// arashi-sweep.json.
//
// -split (without -experiment and -addr) adds, per request type, where the
// server's time went: before the type's handler (HttpRecv's dispatch and
// the stage's queue) and in it, beside the clients' p90. -degrade
// off|alone|admission sets the in-process service's degradation.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/apps/arashi/load"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
)

// Predicates of the experiments (arashi.Config.Predicate).
const (
	noControl  = "{type: threshold, limit: 1000000}"
	multiclass = "{type: multiclass, targets: {0: 250ms, 1: 250ms}}"
	target     = 250 * time.Millisecond
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	addr, experiment, out, points, db string
	degrade                           arashi.Degrade
	users, high, low, accounts, pool  int
	split                             bool
	duration, warmup                  time.Duration
	seed                              uint64
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("arashi-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.addr, "addr", "", "the Arashi service (default: one started in this process)")
	fs.StringVar(&o.experiment, "experiment", "", "sweep (Figs. 47, 48, 53, 54), classes (Figs. 58, 59), spike (Figs. 52, 55), degrade (Figs. 56, 57), types (redraw Figs. 48, 54)")
	fs.StringVar(&o.out, "o", "docs/figures", "directory for the experiments' SVG and JSON files")
	fs.StringVar(&o.points, "points", "1,2,4,8,16,32,64,128,256,512,1024", "user counts of the sweep")
	fs.StringVar(&o.db, "db", "", "database of the in-process service (default: a fresh one, generated once)")
	fs.IntVar(&o.users, "users", 16, "emulated users")
	fs.IntVar(&o.high, "high", 0, "how many of the users are in class 1 (X-Class: 1)")
	fs.IntVar(&o.low, "low", 128, "class-0 users of -experiment classes (its class-1 users: -high, default 128)")
	fs.IntVar(&o.accounts, "accounts", 64, "generated accounts (user i logs in as account 1 + i mod accounts)")
	fs.IntVar(&o.pool, "pool", 4, "database connections of the in-process service")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured time per run (per point of a sweep)")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "time before measuring")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the generator and of the users")
	degradeMode := fs.String("degrade", "off", "service degradation of the in-process service without -experiment: off, alone, admission")
	fs.BoolVar(&o.split, "split", false, "also split each type's time on the server (in-process service only)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.degrade, err = arashi.ParseDegrade(*degradeMode); err != nil {
		fmt.Fprintln(stderr, "arashi-load:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	switch o.experiment {
	case "":
		err = plain(o, log, stdout)
	case "sweep":
		err = sweep(o, log, stdout)
	case "classes":
		err = classes(o, log, stdout)
	case "spike":
		err = spike(o, log, stdout)
	case "types":
		err = types(o)
	case "degrade":
		err = degrade(o, log, stdout)
	default:
		err = fmt.Errorf("unknown experiment %q (sweep, classes, spike, degrade, types)", o.experiment)
	}
	if err != nil {
		fmt.Fprintln(stderr, "arashi-load:", err)
		return 1
	}
	return 0
}

// server starts Arashi in this process on o.db (generated on first use).
func server(o *options, log *slog.Logger, predicate string) (*arashi.Service, error) {
	return serverDegrading(o, log, predicate, arashi.DegradeOff)
}

func serverDegrading(o *options, log *slog.Logger, predicate string, degrade arashi.Degrade) (*arashi.Service, error) {
	if o.db == "" {
		dir, err := os.MkdirTemp("", "arashi-load-")
		if err != nil {
			return nil, err
		}
		o.db = filepath.Join(dir, "arashi.db")
	}
	return arashi.Start(context.Background(), arashi.Config{
		Addr: "127.0.0.1:0", DB: o.db, Users: o.accounts, Seed: o.seed, Pool: o.pool, Predicate: predicate, Degrade: degrade, Logger: log,
	})
}

func stop(svc *arashi.Service) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = svc.Shutdown(ctx)
}

// drive runs cfg.Users users for warmup+duration.
func drive(cfg load.Config, warmup, duration time.Duration) ([]load.Sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), warmup+duration)
	defer cancel()
	return load.Run(ctx, cfg)
}

// thirds splits a run of o.duration: [in, out) is its middle third,
// bucket the width of a point on the charts over time.
func (o *options) thirds() (total, in, out, bucket time.Duration) {
	total = o.duration
	return total, total / 3, 2 * total / 3, max(time.Second, total/30)
}

// The load spike of Figs. 52 and 55 to 57: spikeBase users throughout,
// spikeBurst more in the middle third of the run.
const spikeBase, spikeBurst = 3, 1000

// middleThird drives users users against addr for o.duration: the first
// steady of them throughout, the others in the middle third only. class,
// if not nil, gives each user's class.
func middleThird(o *options, addr string, users, steady int, class func(int) int) ([]load.Sample, error) {
	total, in, out, _ := o.thirds()
	return drive(load.Config{
		Addr: addr, Users: users, Accounts: o.accounts, Seed: o.seed, Class: class,
		Start: func(i int) time.Duration {
			if i >= steady {
				return in
			}
			return 0
		},
		Stop: func(i int) time.Duration {
			if i >= steady {
				return out
			}
			return total
		},
	}, 0, total)
}

// overTime appends to p the p90 (ms) and to r the % rejected of the
// samples that window keeps in each bucket of [0, total), at the bucket's
// middle; a bucket without requests is left out.
func overTime(p, r *series, samples []load.Sample, total, bucket time.Duration, window func(from, to time.Duration) func(load.Sample) bool) {
	for t := time.Duration(0); t+bucket <= total; t += bucket {
		s := load.Summarize(samples, window(t, t+bucket))
		if s.Requests == 0 {
			continue
		}
		x := (t + bucket/2).Seconds()
		p.x, p.y = append(p.x, x), append(p.y, ms(s.P90))
		r.x, r.y = append(r.x, x), append(r.y, 100*s.RejectRate())
	}
}

// everySecond calls sample once a second with the seconds since it was
// started, until the returned end is called; end waits for sample to
// return.
func everySecond(sample func(elapsed float64)) (end func()) {
	done, sampled := make(chan struct{}), make(chan struct{})
	begin := time.Now()
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				sample(now.Sub(begin).Seconds())
			}
		}
	}()
	return func() {
		close(done)
		<-sampled
	}
}

func plain(o options, log *slog.Logger, stdout io.Writer) error {
	addr := o.addr
	var svc *arashi.Service
	if addr == "" {
		var err error
		if svc, err = serverDegrading(&o, log, "", o.degrade); err != nil {
			return err
		}
		defer stop(svc)
		addr = svc.App.Addr().String()
		if o.split {
			t := time.AfterFunc(o.warmup, func() { svc.App.RecordTimings(true) })
			defer t.Stop()
		}
	} else if o.split {
		return fmt.Errorf("-split needs the in-process service (no -addr)")
	}
	cfg := load.Config{Addr: addr, Users: o.users, Accounts: o.accounts, Seed: o.seed}
	if o.high > 0 {
		cfg.Class = func(i int) int {
			if i >= o.users-o.high {
				return 1
			}
			return 0
		}
	}
	samples, err := drive(cfg, o.warmup, o.duration)
	if err != nil {
		return err
	}
	from, to := o.warmup, o.warmup+o.duration
	fmt.Fprintf(stdout, "%d users, %v measured after %v\n\n", o.users, o.duration, o.warmup)
	fmt.Fprintln(stdout, "| type | requests | rejected | p50 ms | p90 ms |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|")
	for _, k := range arashi.Kinds() {
		s := load.Summarize(samples, load.OfKind(k, from, to))
		if s.Requests > 0 {
			fmt.Fprintf(stdout, "| %s | %d | %.1f %% | %.1f | %.1f |\n", k, s.Requests, 100*s.RejectRate(), ms(s.P50), ms(s.P90))
		}
	}
	all := load.Summarize(samples, load.Window(from, to))
	fmt.Fprintf(stdout, "| all | %d | %.1f %% | %.1f | %.1f |\n\nthroughput %.1f req/s (admitted)\n",
		all.Requests, 100*all.RejectRate(), ms(all.P50), ms(all.P90), float64(all.Admitted)/o.duration.Seconds())
	for c := 0; c <= 1 && o.high > 0; c++ {
		s := load.Summarize(samples, load.OfClass(c, from, to))
		fmt.Fprintf(stdout, "class %d: %d requests, %.1f %% rejected, p90 %.1f ms\n", c, s.Requests, 100*s.RejectRate(), ms(s.P90))
	}
	if svc != nil && o.split {
		split(svc, samples, from, to, stdout)
	}
	return nil
}

// split prints, per request type, the admitted p90 the clients measured
// beside the p90 of the parts of the server time the type's stage sees:
// before its handler (HttpRecv's dispatch and the stage's queue), the
// handler's work, and both; the rest is the request's way in (the aio
// loop reading and parsing), HttpSend and the clients' own scheduling.
func split(svc *arashi.Service, samples []load.Sample, from, to time.Duration, stdout io.Writer) {
	fmt.Fprintln(stdout, "\n| type | client p90 ms | server: before the handler p90 | handler p90 | before + handler p90 | rest (client − server p90) | stage rt controller p90 (smoothed) |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|")
	for _, k := range arashi.Kinds() {
		c := load.Summarize(samples, load.OfKind(k, from, to))
		ts := svc.App.Timings(k)
		if c.Admitted == 0 || len(ts) == 0 {
			continue
		}
		var before, service, both []time.Duration
		for _, t := range ts {
			before, service, both = append(before, t.Before), append(service, t.Service), append(both, t.Before+t.Service)
		}
		srv := load.Percentile(both, 0.9)
		rt := "–"
		if st, ok := svc.Manager.Stage(k.Handler()[len("arashi."):]); ok {
			if r, ok := st.Sink().Predicate().(*enqueuepred.ResponseTime); ok {
				rt = fmt.Sprintf("%.0f", ms(r.P90()))
			}
		}
		fmt.Fprintf(stdout, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n", k, ms(c.P90), ms(load.Percentile(before, 0.9)),
			ms(load.Percentile(service, 0.9)), ms(srv), ms(c.P90-srv), rt)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// point is one run of the sweep.
type point struct {
	Users      int                `json:"users"`
	Control    bool               `json:"control"`
	Throughput float64            `json:"throughput"` // admitted requests/s
	Work       float64            `json:"work"`       // admitted requests/s other than logins
	P90        float64            `json:"p90_ms"`     // admitted
	Rejected   float64            `json:"rejected"`   // fraction
	Requests   int                `json:"requests"`
	Errors     int                `json:"errors"`
	Types      map[string]float64 `json:"type_p90_ms"`
	TypeReqs   map[string]int     `json:"type_requests"`
}

func measure(o options, log *slog.Logger, users int, control bool) (point, error) {
	pred := noControl
	if control {
		pred = arashi.DefaultPredicate
	}
	svc, err := server(&o, log, pred)
	if err != nil {
		return point{}, err
	}
	defer stop(svc)
	samples, err := drive(load.Config{Addr: svc.App.Addr().String(), Users: users, Accounts: o.accounts, Seed: o.seed}, o.warmup, o.duration)
	if err != nil {
		return point{}, err
	}
	from, to := o.warmup, o.warmup+o.duration
	all := load.Summarize(samples, load.Window(from, to))
	p := point{Users: users, Control: control, Throughput: float64(all.Admitted) / o.duration.Seconds(),
		P90: ms(all.P90), Rejected: all.RejectRate(), Requests: all.Requests, Errors: all.Errors,
		Types: map[string]float64{}, TypeReqs: map[string]int{}}
	for _, k := range arashi.Kinds() {
		s := load.Summarize(samples, load.OfKind(k, from, to))
		if s.Requests > 0 {
			p.Types[k.String()], p.TypeReqs[k.String()] = ms(s.P90), s.Requests
		}
		if k != arashi.Login {
			p.Work += float64(s.Admitted) / o.duration.Seconds()
		}
	}
	return p, nil
}

func sweep(o options, log *slog.Logger, stdout io.Writer) error {
	var users []int
	for _, f := range strings.Split(o.points, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-points: %q is not a user count", f)
		}
		users = append(users, n)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var pts []point
	for _, control := range []bool{false, true} {
		for _, n := range users {
			p, err := measure(o, log, n, control)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "users %d control %v: %.1f req/s, p90 %.1f ms, rejected %.1f %%\n", n, control, p.Throughput, p.P90, 100*p.Rejected)
			pts = append(pts, p)
		}
	}
	data, _ := json.MarshalIndent(pts, "", " ")
	if err := os.WriteFile(filepath.Join(o.out, "arashi-sweep.json"), data, 0o644); err != nil {
		return err
	}
	line := func(control bool, f func(point) float64) ([]float64, []float64) {
		var x, y []float64
		for _, p := range pts {
			if p.Control == control {
				x, y = append(x, float64(p.Users)), append(y, f(p))
			}
		}
		return x, y
	}
	tx, ty := line(false, func(p point) float64 { return p.Throughput })
	px, py := line(false, func(p point) float64 { return p.P90 })
	cx, cy := line(true, func(p point) float64 { return p.P90 })
	rx, ry := line(true, func(p point) float64 { return 100 * p.Rejected })
	if err := (chart{title: "Arashi throughput, no admission control (thesis Fig. 47)", xlabel: "users", ylabel: "requests/s", logx: true,
		lines: []series{{name: "throughput", x: tx, y: ty}}}).write(filepath.Join(o.out, "arashi-fig47-throughput.svg")); err != nil {
		return err
	}
	if err := (chart{title: "Arashi 90th-percentile response time, no control (Fig. 47)", xlabel: "users", ylabel: "p90 ms", logx: true,
		lines: []series{{name: "p90", x: px, y: py}}}).write(filepath.Join(o.out, "arashi-fig47-p90.svg")); err != nil {
		return err
	}
	if err := (chart{title: "Arashi p90 with and without overload control (Fig. 53)", xlabel: "users", ylabel: "p90 ms (admitted)", logx: true,
		ref: ms(target), refLabel: "target 250 ms",
		lines: []series{{name: "no control", x: px, y: py, dashed: true}, {name: "rt per type", x: cx, y: cy}}}).write(filepath.Join(o.out, "arashi-fig53-p90.svg")); err != nil {
		return err
	}
	if err := (chart{title: "Arashi requests rejected by the rt controllers (Fig. 53)", xlabel: "users", ylabel: "% rejected", logx: true,
		lines: []series{{name: "rejected", x: rx, y: ry}}}).write(filepath.Join(o.out, "arashi-fig53-rejected.svg")); err != nil {
		return err
	}
	if err := typeCharts(pts, o.out); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "| users | no control: req/s (not logins) | p90 ms | rt control: admitted req/s (not logins) | p90 ms | rejected |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|")
	for i, n := range users {
		a, b := pts[i], pts[len(users)+i]
		fmt.Fprintf(stdout, "| %d | %.0f (%.0f) | %.0f | %.0f (%.0f) | %.0f | %.1f %% |\n", n, a.Throughput, a.Work, a.P90, b.Throughput, b.Work, b.P90, 100*b.Rejected)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| users | control | "+strings.Join(kindNames(), " | ")+" |")
	fmt.Fprintln(stdout, "|---|---|"+strings.Repeat("---|", len(arashi.Kinds())))
	for _, p := range pts {
		var cells []string
		for _, k := range kindNames() {
			if p.TypeReqs[k] == 0 {
				cells = append(cells, "–")
			} else {
				cells = append(cells, fmt.Sprintf("%.0f (%d)", p.Types[k], p.TypeReqs[k]))
			}
		}
		fmt.Fprintf(stdout, "| %d | %v | %s |\n", p.Users, p.Control, strings.Join(cells, " | "))
	}
	return nil
}

// typeCharts draws Figs. 48 and 54 from a sweep's points: the admitted
// p90 of every request type against users, without and with control.
func typeCharts(pts []point, out string) error {
	for _, fig := range []struct {
		name, title string
		control     bool
	}{
		{"arashi-fig48-p90.svg", "Arashi p90 per request type, no control (thesis Fig. 48)", false},
		{"arashi-fig54-p90.svg", "Arashi p90 per request type, rt per type (thesis Fig. 54)", true},
	} {
		var lines []series
		for i, k := range kindNames() {
			s := series{name: k, dashed: i%2 == 1}
			for _, p := range pts {
				if p.Control == fig.control && p.TypeReqs[k] > 0 {
					s.x, s.y = append(s.x, float64(p.Users)), append(s.y, p.Types[k])
				}
			}
			if len(s.x) > 0 {
				lines = append(lines, s)
			}
		}
		c := chart{title: fig.title, xlabel: "users", ylabel: "p90 ms (admitted)", logx: true, lines: lines}
		if fig.control {
			c.ref, c.refLabel = ms(target), "target 250 ms"
		}
		if err := c.write(filepath.Join(out, fig.name)); err != nil {
			return err
		}
	}
	return nil
}

// types redraws Figs. 48 and 54 from the sweep's JSON file in -o.
func types(o options) error {
	data, err := os.ReadFile(filepath.Join(o.out, "arashi-sweep.json"))
	if err != nil {
		return err
	}
	var pts []point
	if err := json.Unmarshal(data, &pts); err != nil {
		return fmt.Errorf("arashi-sweep.json: %w", err)
	}
	return typeCharts(pts, o.out)
}

func kindNames() []string {
	var out []string
	for _, k := range arashi.Kinds() {
		out = append(out, k.String())
	}
	return out
}

// classes runs Figs. 58 and 59: low-class users throughout, high-class
// users in the middle third.
func classes(o options, log *slog.Logger, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	low, high := o.low, o.high
	if high == 0 {
		high = 128
	}
	suffix := ""
	if low != 128 || high != 128 {
		suffix = fmt.Sprintf("-low%d-high%d", low, high)
	}
	total, in, out, bucket := o.thirds()
	fmt.Fprintf(stdout, "%d class-0 users throughout, %d class-1 users from %v to %v\n\n", low, high, in, out)
	fmt.Fprintln(stdout, "| controller | class | requests while both active | rejected | admitted p90 ms |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|")
	for _, run := range []struct{ fig, name, pred string }{
		{"fig58", "one rt controller per stage (no differentiation)", arashi.DefaultPredicate},
		{"fig59", "multiclass controllers", multiclass},
	} {
		svc, err := server(&o, log, run.pred)
		if err != nil {
			return err
		}
		samples, err := middleThird(&o, svc.App.Addr().String(), low+high, low, func(i int) int { return min(1, i/low) })
		stop(svc)
		if err != nil {
			return err
		}
		var lines, rej []series
		for c := 0; c <= 1; c++ {
			p, r := series{name: fmt.Sprintf("class %d p90", c), dashed: c == 0}, series{name: fmt.Sprintf("class %d rejected", c), dashed: c == 0}
			overTime(&p, &r, samples, total, bucket, func(from, to time.Duration) func(load.Sample) bool { return load.OfClass(c, from, to) })
			lines, rej = append(lines, p), append(rej, r)
			s := load.Summarize(samples, load.OfClass(c, in, out))
			fmt.Fprintf(stdout, "| %s | %d | %d | %.1f %% | %.0f |\n", run.name, c, s.Requests, 100*s.RejectRate(), ms(s.P90))
		}
		title := fmt.Sprintf("Arashi, two classes: %s (thesis Fig. %s)", run.name, strings.TrimPrefix(run.fig, "fig"))
		if err := (chart{title: title, xlabel: "time (s); class 1 active in the middle third", ylabel: "p90 ms (admitted)",
			ref: ms(target), refLabel: "target 250 ms", lines: lines}).write(filepath.Join(o.out, "arashi-"+run.fig+suffix+"-p90.svg")); err != nil {
			return err
		}
		if err := (chart{title: title, xlabel: "time (s); class 1 active in the middle third", ylabel: "% rejected",
			lines: rej}).write(filepath.Join(o.out, "arashi-"+run.fig+suffix+"-rejected.svg")); err != nil {
			return err
		}
	}
	return nil
}

// spike runs Figs. 52 and 55: a base load of 3 users and a spike of 1000
// more in the middle third of the run, with and without control.
func spike(o options, log *slog.Logger, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	total, in, out, bucket := o.thirds()
	fmt.Fprintf(stdout, "%d users throughout, %d more from %v to %v\n\n", spikeBase, spikeBurst, in, out)
	fmt.Fprintln(stdout, "| control | p90 before ms | p90 during the spike ms | rejected during the spike | admitted req/s during the spike |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|")
	var p90s, rejs []series
	for _, control := range []bool{false, true} {
		pred, name := noControl, "no control"
		if control {
			pred, name = arashi.DefaultPredicate, "rt per type"
		}
		svc, err := server(&o, log, pred)
		if err != nil {
			return err
		}
		// Sample the ListFolders controller once a second (Fig. 52).
		var trace struct{ t, p90, rate []float64 }
		endTrace := func() {}
		if st, ok := svc.Manager.Stage("ListFolders"); ok && control {
			endTrace = everySecond(func(elapsed float64) {
				if rt, ok := st.Sink().Predicate().(*enqueuepred.ResponseTime); ok {
					trace.t = append(trace.t, elapsed)
					trace.p90 = append(trace.p90, ms(rt.P90()))
					trace.rate = append(trace.rate, rt.Rate())
				}
			})
		}
		samples, err := middleThird(&o, svc.App.Addr().String(), spikeBase+spikeBurst, spikeBase, nil)
		endTrace()
		stop(svc)
		if err != nil {
			return err
		}
		p, r := series{name: name, dashed: !control}, series{name: name, dashed: !control}
		overTime(&p, &r, samples, total, bucket, load.Window)
		p90s, rejs = append(p90s, p), append(rejs, r)
		before, during := load.Summarize(samples, load.Window(0, in)), load.Summarize(samples, load.Window(in, out))
		fmt.Fprintf(stdout, "| %s | %.0f | %.0f | %.1f %% | %.0f |\n", name, ms(before.P90), ms(during.P90), 100*during.RejectRate(),
			float64(during.Admitted)/(out-in).Seconds())
		if control {
			xl := "time (s); 1000 more users in the middle third"
			if err := (chart{title: "ListFolders controller in a spike: its p90 (thesis Fig. 52)", xlabel: xl, ylabel: "p90 ms (stage)",
				ref: ms(target), refLabel: "target 250 ms", lines: []series{{name: "measured p90", x: trace.t, y: trace.p90}}}).write(filepath.Join(o.out, "arashi-fig52-p90.svg")); err != nil {
				return err
			}
			if err := (chart{title: "ListFolders controller in a spike: admission rate (thesis Fig. 52)", xlabel: xl, ylabel: "admission rate, requests/s",
				lines: []series{{name: "token bucket rate", x: trace.t, y: trace.rate}}}).write(filepath.Join(o.out, "arashi-fig52-rate.svg")); err != nil {
				return err
			}
		}
	}
	xl := "time (s); 1000 more users in the middle third"
	if err := (chart{title: "Arashi clients' p90 in a load spike (thesis Fig. 55)", xlabel: xl, ylabel: "p90 ms (admitted)",
		ref: ms(target), refLabel: "target 250 ms", lines: p90s}).write(filepath.Join(o.out, "arashi-fig55-p90.svg")); err != nil {
		return err
	}
	return (chart{title: "Arashi requests rejected in a load spike (thesis Fig. 55)", xlabel: xl, ylabel: "% rejected",
		lines: rejs}).write(filepath.Join(o.out, "arashi-fig55-rejected.svg"))
}
