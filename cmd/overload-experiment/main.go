// Command overload-experiment reproduces the SEDA thesis's overload-control
// experiments (chapter 7) on the real stage runtime, with time scaled down:
//
//   - spike (Fig. 55): a bottleneck stage, load jumps from 3 to 1000
//     closed-loop clients; compared without admission control, with the
//     thesis's response-time controller (mode thesis) and with the fast
//     default controller (mode fast).
//   - multiclass (Figs. 58 and 59): two classes of 128 clients; the high
//     class joins halfway; compared with one controller for everybody and
//     with the multiclass controller.
//
// The bottleneck handler sleeps for its service time (like Arashi's database
// calls), on a fixed pool of goroutines, so its capacity is workers/service.
// A rejected client waits -backoff before trying again (Arashi: 5 s).
//
//   - matrix: the stage shapes of issue 16 (1 to 16 workers, 1 to 100 ms,
//     constant and heavy-tailed service, mild and heavy overload, load
//     steps, below capacity) under open-loop Poisson load, for the rt
//     controller and the adaptive concurrency limits; one table row per
//     run: admitted p90 / target, goodput / capacity, refusals below
//     capacity, and how far rt's p90 estimate is from the real one.
//
// Usage:
//
//	overload-experiment [-experiment spike|multiclass|all|matrix] [-modes none,thesis,fast] ...
//	overload-experiment -experiment matrix [-controls rt,vegas,gradient] [-matrix-dur 12s] [-scenario issue]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/internal/clock"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

type options struct {
	experiment string
	modes      []string
	service    time.Duration
	workers    int
	think      time.Duration
	backoff    time.Duration
	target     time.Duration
	base       int
	clients    int
	baseDur    time.Duration
	spikeDur   time.Duration
	tailDur    time.Duration
	classSize  int
	classPhase time.Duration // multiclass: low class alone, then both for twice as long, then low alone
	series     bool
	controls   []string      // matrix: controllers
	matrixDur  time.Duration // matrix: per run
	scenario   string        // matrix: only scenarios whose name contains this
}

func main() {
	var o options
	var modes string
	var controls string
	flag.StringVar(&o.experiment, "experiment", "all", "spike, multiclass, all (both) or matrix")
	flag.StringVar(&controls, "controls", "rt,vegas,gradient", "matrix: comma-separated controllers (rt, vegas, gradient, none)")
	flag.DurationVar(&o.matrixDur, "matrix-dur", 12*time.Second, "matrix: duration of each run")
	flag.StringVar(&o.scenario, "scenario", "", "matrix: run only the scenarios whose name contains this")
	flag.StringVar(&modes, "modes", "", "comma-separated runs (spike: none,thesis,fast; multiclass: single,thesis,fast); empty: all")
	flag.DurationVar(&o.service, "service", 10*time.Millisecond, "bottleneck service time per request")
	flag.IntVar(&o.workers, "workers", 4, "bottleneck goroutines (capacity = workers/service)")
	flag.DurationVar(&o.think, "think", 200*time.Millisecond, "client think time between requests")
	flag.DurationVar(&o.backoff, "backoff", 500*time.Millisecond, "client wait after a rejection (thesis 5 s, scaled /10)")
	flag.DurationVar(&o.target, "target", 100*time.Millisecond, "90th-percentile response-time target (thesis 1 s, scaled /10)")
	flag.IntVar(&o.base, "base", 3, "spike: clients before and after the spike")
	flag.IntVar(&o.clients, "clients", 1000, "spike: clients during the spike")
	flag.DurationVar(&o.baseDur, "before", 3*time.Second, "spike: time before the spike")
	flag.DurationVar(&o.spikeDur, "spike", 15*time.Second, "spike: duration of the spike")
	flag.DurationVar(&o.tailDur, "after", 3*time.Second, "spike: time after the spike")
	flag.IntVar(&o.classSize, "class-clients", 128, "multiclass: clients per class")
	flag.DurationVar(&o.classPhase, "class-phase", 5*time.Second, "multiclass: low class alone for this long, then both classes for twice as long, then low alone again")
	flag.BoolVar(&o.series, "series", true, "print per-second series")
	flag.Parse()
	if modes != "" {
		o.modes = strings.Split(modes, ",")
	}
	o.controls = strings.Split(controls, ",")
	fmt.Printf("# overload-experiment %s\n\n", strings.Join(os.Args[1:], " "))
	if o.experiment == "matrix" {
		runMatrix(os.Stdout, o.controls, o.matrixDur, o.scenario, o.series)
		return
	}
	fmt.Printf("bottleneck: %d workers x %v service = capacity %.0f req/s; think %v, backoff %v, target %v\n\n",
		o.workers, o.service, o.capacity(), o.think, o.backoff, o.target)
	switch o.experiment {
	case "spike":
		runSpike(os.Stdout, o)
	case "multiclass":
		runMulticlass(os.Stdout, o)
	case "all":
		runSpike(os.Stdout, o)
		runMulticlass(os.Stdout, o)
	default:
		log.Fatalf("unknown experiment %q", o.experiment)
	}
}

func (o options) capacity() float64 { return float64(o.workers) / o.service.Seconds() }

func (o options) want(mode string, all ...string) bool {
	if len(o.modes) == 0 {
		return slices.Contains(all, mode)
	}
	return slices.Contains(o.modes, mode)
}

// request is one client request; the bottleneck answers on reply.
type request struct {
	class int
	reply chan struct{}
}

func (r *request) Class() int { return r.class }

// record is one client observation.
type record struct {
	at       time.Duration // since the run started: completion or rejection
	rt       time.Duration
	class    int
	rejected bool
}

// run is one experiment run on a fresh manager.
type run struct {
	o     options
	pred  sink.Predicate
	mgr   *stage.Manager
	sink  sink.Sink
	start time.Time

	mu      sync.Mutex
	records []record
	rates   []float64 // the predicate's admission rate, once per second
}

func newRun(o options, pred sink.Predicate) (*run, error) {
	r := &run{o: o, pred: pred, mgr: stage.NewManager(stage.Options{})}
	service := o.service
	h := stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			time.Sleep(service)
			e.(*request).reply <- struct{}{}
		}
		return nil
	})
	st, err := r.mgr.CreateStage("Bottleneck", h, stage.StageConfig{
		Predicate:  pred,
		ThreadPool: stage.ThreadPoolConfig{Min: o.workers, Max: o.workers, Initial: o.workers},
		Batching:   stage.BatchingConfig{Max: 1},
	})
	if err != nil {
		return nil, err
	}
	r.sink = st.Sink()
	return r, nil
}

// client loops until ctx ends: request, wait for the answer, think; after a
// rejection, back off.
func (r *run) client(ctx context.Context, class int, wg *sync.WaitGroup) {
	defer wg.Done()
	req := &request{class: class, reply: make(chan struct{}, 1)}
	var local []record
	defer func() {
		r.mu.Lock()
		r.records = append(r.records, local...)
		r.mu.Unlock()
	}()
	sleep := func(d time.Duration) bool { return clock.Sleep(ctx, d) }
	// Do not start in lock step.
	if !sleep(time.Duration(rand.Int64N(int64(r.o.think) + 1))) {
		return
	}
	for {
		t0 := time.Now()
		if err := r.sink.Enqueue(req); err != nil {
			local = append(local, record{at: time.Since(r.start), class: class, rejected: true})
			if !sleep(r.o.backoff) {
				return
			}
			continue
		}
		select {
		case <-req.reply:
		case <-ctx.Done():
			return // the answer is not counted: the run is over
		}
		now := time.Now()
		local = append(local, record{at: now.Sub(r.start), rt: now.Sub(t0), class: class})
		if !sleep(r.o.think) {
			return
		}
	}
}

// phase starts n clients of a class for the interval [from, to) of the run.
type phase struct {
	from, to time.Duration
	n, class int
}

func (r *run) execute(phases []phase, total time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.mgr.Start(ctx); err != nil {
		return err
	}
	r.start = time.Now()
	var wg sync.WaitGroup
	for _, p := range phases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !clock.Sleep(ctx, p.from) {
				return
			}
			pctx, pcancel := context.WithTimeout(ctx, p.to-p.from)
			defer pcancel()
			var cw sync.WaitGroup
			for i := 0; i < p.n; i++ {
				cw.Add(1)
				go r.client(pctx, p.class, &cw)
			}
			cw.Wait()
		}()
	}
	tick := time.NewTicker(time.Second)
	for sec := 0; sec < int(total/time.Second); sec++ {
		<-tick.C
		rate := -1.0
		if in, ok := r.pred.(enqueuepred.Inspector); ok {
			in.Inspect(func(name string, v float64) {
				if name == "rate" || strings.HasSuffix(name, ".rate") && rate < 0 {
					rate = v
				}
			})
		}
		r.rates = append(r.rates, rate)
	}
	tick.Stop()
	cancel()
	wg.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	return r.mgr.Shutdown(sctx)
}

// stats summarizes records with at in [from, to) and class (-1: all).
type stats struct {
	attempts, rejects, done int
	p90, p50                time.Duration
	goodput                 float64
}

func (r *run) stats(from, to time.Duration, class int) stats {
	var s stats
	var rts []time.Duration
	for _, rec := range r.records {
		if rec.at < from || rec.at >= to || (class >= 0 && rec.class != class) {
			continue
		}
		s.attempts++
		if rec.rejected {
			s.rejects++
			continue
		}
		s.done++
		rts = append(rts, rec.rt)
	}
	if len(rts) > 0 {
		slices.Sort(rts)
		s.p90 = rts[int(0.9*float64(len(rts)))]
		s.p50 = rts[len(rts)/2]
	}
	s.goodput = float64(s.done) / (to - from).Seconds()
	return s
}

func (s stats) rejectFrac() float64 {
	if s.attempts == 0 {
		return 0
	}
	return float64(s.rejects) / float64(s.attempts)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }

func (r *run) printSeries(w io.Writer, name string, total time.Duration, classes []int) {
	fmt.Fprintf(w, "\n%s, per second (p90 and goodput of completed requests, reject %% of attempts):\n\n", name)
	fmt.Fprintf(w, "| t (s) |")
	for _, c := range classes {
		prefix := ""
		if c >= 0 {
			prefix = fmt.Sprintf("class %d ", c)
		}
		fmt.Fprintf(w, " %sp90 ms | %sreject %% | %sgoodput/s |", prefix, prefix, prefix)
	}
	fmt.Fprintf(w, " admission rate |\n|---|")
	for range classes {
		fmt.Fprintf(w, "---|---|---|")
	}
	fmt.Fprintf(w, "---|\n")
	for sec := 0; sec < int(total/time.Second); sec++ {
		fmt.Fprintf(w, "| %d |", sec)
		for _, c := range classes {
			s := r.stats(time.Duration(sec)*time.Second, time.Duration(sec+1)*time.Second, c)
			fmt.Fprintf(w, " %s | %.0f | %.0f |", ms(s.p90), 100*s.rejectFrac(), s.goodput)
		}
		rate := "-"
		if sec < len(r.rates) && r.rates[sec] >= 0 {
			rate = fmt.Sprintf("%.0f", r.rates[sec])
		}
		fmt.Fprintf(w, " %s |\n", rate)
	}
}

func runSpike(w io.Writer, o options) {
	total := o.baseDur + o.spikeDur + o.tailDur
	from, to := o.baseDur, o.baseDur+o.spikeDur
	fmt.Fprintf(w, "## Spike (thesis Fig. 55): %d clients, %d during [%v, %v), %v in all\n\n", o.base, o.clients, from, to, total)
	type result struct {
		mode              string
		all, settled      stats
		reach             string
		maxP90AfterSettle time.Duration
	}
	var results []result
	var runs []*run
	for _, mode := range []string{"none", "thesis", "fast"} {
		if !o.want(mode, "none", "thesis", "fast") {
			continue
		}
		var pred sink.Predicate
		switch mode {
		case "thesis", "fast":
			rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: o.target, Mode: mode})
			if err != nil {
				log.Fatal(err)
			}
			pred = rt
		}
		r, err := newRun(o, pred)
		if err != nil {
			log.Fatal(err)
		}
		phases := []phase{
			{0, total, o.base, 0},
			{from, to, o.clients - o.base, 0},
		}
		if err := r.execute(phases, total); err != nil {
			log.Printf("%s: shutdown: %v", mode, err)
		}
		res := result{mode: mode, all: r.stats(from, to, -1), settled: r.stats(from+5*time.Second, to, -1), reach: "never"}
		for sec := from; sec < to; sec += time.Second {
			if r.stats(sec, sec+time.Second, -1).goodput >= 0.8*o.capacity() {
				res.reach = fmt.Sprintf("%.0f s", (sec + time.Second - from).Seconds())
				break
			}
		}
		for sec := from + 5*time.Second; sec < to; sec += time.Second {
			res.maxP90AfterSettle = max(res.maxP90AfterSettle, r.stats(sec, sec+time.Second, -1).p90)
		}
		results = append(results, res)
		runs = append(runs, r)
	}
	fmt.Fprintf(w, "Summary over the spike [%v, %v); \"settled\" = from 5 s after the spike began:\n\n", from, to)
	fmt.Fprintf(w, "| control | p90 ms (spike) | p90 ms (settled) | worst 1-s p90 ms (settled) | reject %% | goodput/s | goodput %% of capacity | 1-s goodput >= 80%% capacity after |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|\n")
	for _, res := range results {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f | %.0f | %.0f | %s |\n", res.mode, ms(res.all.p90), ms(res.settled.p90),
			ms(res.maxP90AfterSettle), 100*res.all.rejectFrac(), res.all.goodput, 100*res.all.goodput/o.capacity(), res.reach)
	}
	if o.series {
		for i, r := range runs {
			r.printSeries(w, "spike, control "+results[i].mode, total, []int{-1})
		}
	}
	fmt.Fprintln(w)
}

func runMulticlass(w io.Writer, o options) {
	from, to, total := o.classPhase, 3*o.classPhase, 4*o.classPhase
	fmt.Fprintf(w, "## Multiclass (thesis Figs. 58, 59): %d low-class clients throughout, %d high-class clients during [%v, %v)\n\n",
		o.classSize, o.classSize, from, to)
	type result struct {
		mode   string
		lo, hi stats
	}
	var results []result
	var runs []*run
	for _, mode := range []string{"single", "thesis", "fast"} {
		if !o.want(mode, "single", "thesis", "fast") {
			continue
		}
		var pred sink.Predicate
		var err error
		switch mode {
		case "single":
			pred, err = enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: o.target})
		default:
			pred, err = enqueuepred.NewMulticlass(enqueuepred.MulticlassConfig{
				Targets: map[int]time.Duration{0: o.target, 1: o.target},
				RT:      enqueuepred.RTConfig{Mode: mode},
			})
		}
		if err != nil {
			log.Fatal(err)
		}
		r, err := newRun(o, pred)
		if err != nil {
			log.Fatal(err)
		}
		if err := r.execute([]phase{{0, total, o.classSize, 0}, {from, to, o.classSize, 1}}, total); err != nil {
			log.Printf("%s: shutdown: %v", mode, err)
		}
		results = append(results, result{mode: mode, lo: r.stats(from, to, 0), hi: r.stats(from, to, 1)})
		runs = append(runs, r)
	}
	fmt.Fprintf(w, "Summary while both classes are active [%v, %v) (\"single\" = one rt controller for all, no differentiation, Fig. 58):\n\n", from, to)
	fmt.Fprintf(w, "| control | low p90 ms | low reject %% | low goodput/s | high p90 ms | high reject %% | high goodput/s |\n|---|---|---|---|---|---|---|\n")
	for _, res := range results {
		fmt.Fprintf(w, "| %s | %s | %.1f | %.0f | %s | %.1f | %.0f |\n", res.mode, ms(res.lo.p90), 100*res.lo.rejectFrac(), res.lo.goodput,
			ms(res.hi.p90), 100*res.hi.rejectFrac(), res.hi.goodput)
	}
	if o.series {
		for i, r := range runs {
			r.printSeries(w, "multiclass, control "+results[i].mode, total, []int{0, 1})
		}
	}
	fmt.Fprintln(w)
}
