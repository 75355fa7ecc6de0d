package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// scenario is one stage shape and open-loop load of the matrix.
type scenario struct {
	name    string
	workers int
	mean    time.Duration
	heavy   bool // lognormal service (sigma 1: p90 ≈ 2.2 × mean)
	target  time.Duration
	// load is the offered rate as a multiple of the nominal capacity
	// (workers/mean) at a fraction f ∈ [0, 1) of the run.
	load func(f float64) float64
}

func constLoad(x float64) func(float64) float64 { return func(float64) float64 { return x } }

// stepLoad offers 0.5× for the first third, 2× for the second, 0.5× again.
func stepLoad(f float64) float64 {
	if f >= 1.0/3 && f < 2.0/3 {
		return 2
	}
	return 0.5
}

var scenarios = []scenario{
	{"1w × 2ms, 2×", 1, 2 * time.Millisecond, false, 20 * time.Millisecond, constLoad(2)},
	{"4w × 35ms, 1.75× (issue)", 4, 35 * time.Millisecond, false, 150 * time.Millisecond, constLoad(1.75)},
	{"2w × 20ms, 1.3× (issue)", 2, 20 * time.Millisecond, false, 200 * time.Millisecond, constLoad(1.3)},
	{"8w × 100ms, 3×", 8, 100 * time.Millisecond, false, 500 * time.Millisecond, constLoad(3)},
	{"1w × 1ms, 5×", 1, time.Millisecond, false, 10 * time.Millisecond, constLoad(5)},
	{"4w × 10ms heavy-tailed, 2×", 4, 10 * time.Millisecond, true, 100 * time.Millisecond, constLoad(2)},
	{"16w × 50ms heavy-tailed, 1.5×", 16, 50 * time.Millisecond, true, 300 * time.Millisecond, constLoad(1.5)},
	{"4w × 20ms, steps 0.5× → 2× → 0.5×", 4, 20 * time.Millisecond, false, 100 * time.Millisecond, stepLoad},
	{"4w × 10ms, 0.7× (below capacity)", 4, 10 * time.Millisecond, false, 100 * time.Millisecond, constLoad(0.7)},
}

func (s scenario) nominal() float64 { return float64(s.workers) / s.mean.Seconds() }

// matrixEvent is one offered event.
type matrixEvent struct {
	t0  time.Time
	svc time.Duration
}

// matrixRun is one (scenario, controller) run.
type matrixRun struct {
	s    scenario
	ctl  string
	pred sink.Predicate
	dur  time.Duration

	mu       sync.Mutex
	start    time.Time
	done     []int // completions per second
	rts      [][]time.Duration
	rejected []int
	offered  []int
	est      []time.Duration // the controller's p90 at the end of each second (rt)
	comps    []completionRec // every completion
	ests     []estimateRec   // the controller's p90, every 100 ms (rt)
	busy     time.Duration   // total handler time
	nDone    int
}

func newPredicate(ctl string, target time.Duration) (sink.Predicate, error) {
	switch ctl {
	case "rt":
		return enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: target})
	case "vegas":
		return enqueuepred.NewLimit(enqueuepred.LimitConfig{Algorithm: "vegas"})
	case "gradient":
		return enqueuepred.NewLimit(enqueuepred.LimitConfig{Algorithm: "gradient"})
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown controller %q (known: rt, vegas, gradient, none)", ctl)
}

func (r *matrixRun) sec(t time.Time) int {
	return min(max(int(t.Sub(r.start)/time.Second), 0), len(r.done)-1)
}

func (r *matrixRun) execute(seed uint64) error {
	secs := int(r.dur / time.Second)
	r.done, r.rejected, r.offered = make([]int, secs+1), make([]int, secs+1), make([]int, secs+1)
	r.rts, r.est = make([][]time.Duration, secs+1), make([]time.Duration, secs+1)
	mgr := stage.NewManager(stage.Options{})
	h := stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			ev := e.(*matrixEvent)
			t := time.Now()
			time.Sleep(ev.svc)
			now := time.Now()
			r.mu.Lock()
			sec := r.sec(now)
			r.done[sec]++
			r.rts[sec] = append(r.rts[sec], now.Sub(ev.t0))
			r.busy += now.Sub(t)
			r.comps = append(r.comps, completionRec{now.Sub(r.start), now.Sub(ev.t0)})
			r.nDone++
			r.mu.Unlock()
		}
		return nil
	})
	st, err := mgr.CreateStage("Bottleneck", h, stage.StageConfig{
		Predicate:  r.pred,
		ThreadPool: stage.ThreadPoolConfig{Min: r.s.workers, Max: r.s.workers, Initial: r.s.workers},
		Batching:   stage.BatchingConfig{Max: 1},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	q := st.Sink()
	rng := rand.New(rand.NewPCG(seed, 16))
	sigma := 0.0
	if r.s.heavy {
		sigma = 1
	}
	mu := math.Log(float64(r.s.mean)) - sigma*sigma/2
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the controller's estimate, every 100 ms
		defer wg.Done()
		p90er, ok := r.pred.(interface{ P90() time.Duration })
		if !ok {
			return
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				est := p90er.P90()
				r.mu.Lock()
				at := now.Sub(r.start)
				r.ests = append(r.ests, estimateRec{at, est})
				if sec := int(at / time.Second); sec >= 1 && at%time.Second < 100*time.Millisecond {
					r.est[sec-1] = est
				}
				r.mu.Unlock()
			}
		}
	}()
	r.start = time.Now()
	next := r.start
	end := r.start.Add(r.dur)
	for next.Before(end) {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		now := time.Now()
		for !next.After(now) && next.Before(end) {
			svc := r.s.mean
			if r.s.heavy {
				svc = time.Duration(math.Exp(mu + sigma*rng.NormFloat64()))
			}
			ev := &matrixEvent{t0: time.Now(), svc: svc}
			err := q.Enqueue(ev)
			r.mu.Lock()
			sec := r.sec(ev.t0)
			r.offered[sec]++
			if err != nil {
				r.rejected[sec]++
			}
			r.mu.Unlock()
			f := float64(next.Sub(r.start)) / float64(r.dur)
			rate := r.s.load(f) * r.s.nominal()
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
	}
	cancel()
	wg.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	return mgr.Shutdown(sctx)
}

type completionRec struct{ at, rt time.Duration }

type estimateRec struct{ at, est time.Duration }

// row is one line of the matrix table.
type row struct {
	scenario, ctl          string
	p90, worst             float64 // steady p90 and worst 1-s p90, over target
	goodput                float64 // steady completions / min(offered, capacity)
	capacity               float64 // measured: workers / mean handler time
	belowRefused, belowOff int     // refusals / offers in seconds offered below 0.9 × capacity
	firstRefused           int     // refusals in the first second
	estErr                 float64 // rt: mean |estimate − real| / real, real = p90 over the estimate's window; NaN: n/a
}

func (r *matrixRun) summarize() row {
	secs := int(r.dur / time.Second)
	capa := r.s.nominal()
	if r.nDone > 0 {
		capa = float64(r.s.workers) / (r.busy.Seconds() / float64(r.nDone))
	}
	out := row{scenario: r.s.name, ctl: r.ctl, capacity: capa, firstRefused: r.rejected[0], estErr: math.NaN()}
	load := func(sec int) float64 { return r.s.load((float64(sec) + 0.5) / float64(secs)) }
	var all []time.Duration
	var done int
	var want float64
	var errSum float64
	var errN int
	for sec := 0; sec < secs; sec++ {
		offered := load(sec) * r.s.nominal()
		if offered < 0.9*capa && (sec == 0 || load(sec-1)*r.s.nominal() < 0.9*capa) {
			out.belowRefused += r.rejected[sec]
			out.belowOff += r.offered[sec]
		}
		if sec < 2 || (sec > 0 && load(sec) > load(sec-1)) {
			continue // warm-up, and the second after a step up
		}
		all = append(all, r.rts[sec]...)
		done += r.done[sec]
		want += min(offered, capa)
		p := p90(r.rts[sec])
		out.worst = max(out.worst, float64(p)/float64(r.s.target))
	}
	// The estimate against the real p90 of the completions of its own
	// window (the controller's: the last two targets, at least 250 ms),
	// sampled every 100 ms in steady state.
	win := max(2*r.s.target, 250*time.Millisecond)
	for _, e := range r.ests {
		if e.at < 2*time.Second {
			continue
		}
		var rts []time.Duration
		for _, c := range r.comps {
			if c.at > e.at-win && c.at <= e.at {
				rts = append(rts, c.rt)
			}
		}
		if len(rts) < 5 {
			continue
		}
		real := p90(rts)
		errSum += math.Abs(float64(e.est-real)) / float64(real)
		errN++
	}
	out.p90 = float64(p90(all)) / float64(r.s.target)
	if want > 0 {
		out.goodput = float64(done) / want
	}
	if errN > 0 {
		out.estErr = errSum / float64(errN)
	}
	return out
}

func p90(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(0.9*float64(len(s)))]
}

// runMatrix runs every scenario whose name contains filter under each
// controller and writes the table.
func runMatrix(w io.Writer, ctls []string, dur time.Duration, filter string, series bool) {
	fmt.Fprintf(w, "## Scenario matrix: open-loop Poisson arrivals, %v per run\n\n", dur)
	fmt.Fprintf(w, "Steady state = from 2 s on, without the second after a step up. capacity = workers / measured mean handler time.\n\n")
	fmt.Fprintf(w, "| scenario | target | control | admitted p90 / target | worst 1-s p90 / target | goodput / capacity | refused below capacity | refused in 1st s | estimate error |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|\n")
	for i, s := range scenarios {
		if filter != "" && !strings.Contains(s.name, filter) {
			continue
		}
		for _, ctl := range ctls {
			pred, err := newPredicate(ctl, s.target)
			if err != nil {
				log.Fatal(err)
			}
			r := &matrixRun{s: s, ctl: ctl, pred: pred, dur: dur}
			if err := r.execute(uint64(i + 1)); err != nil {
				log.Printf("%s/%s: %v", s.name, ctl, err)
			}
			o := r.summarize()
			below := "-"
			if o.belowOff > 0 {
				below = fmt.Sprintf("%d of %d", o.belowRefused, o.belowOff)
			}
			est := "-"
			if !math.IsNaN(o.estErr) {
				est = fmt.Sprintf("%.0f %%", 100*o.estErr)
			}
			fmt.Fprintf(w, "| %s | %v | %s | %.2f | %.2f | %.0f %% (%.0f/s) | %s | %d | %s |\n", s.name, s.target, ctl,
				o.p90, o.worst, 100*o.goodput, o.capacity, below, o.firstRefused, est)
			if series {
				secs := int(dur / time.Second)
				var b strings.Builder
				for sec := 0; sec < secs; sec++ {
					fmt.Fprintf(&b, " %d:%d/%d/%v/%v", sec, r.done[sec], r.rejected[sec],
						p90(r.rts[sec]).Round(time.Millisecond), r.est[sec].Round(time.Millisecond))
				}
				fmt.Fprintf(w, "<!-- done/refused/p90/estimate per second:%s -->\n", b.String())
			}
		}
	}
	fmt.Fprintln(w)
}
