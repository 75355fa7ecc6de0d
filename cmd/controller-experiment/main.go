// Command controller-experiment compares the thread-pool controllers on
// the same workloads: the SEDA thesis's (type seda, with thrashing
// detection, the default) and the Whirlwind paper's (type whirlwind).
//
//   - io: a stage whose handler blocks 10 ms per event (a sleep, like a
//     database call), under open-loop Poisson load rising step by step;
//     more workers help up to rate × 10 ms of them.
//   - cpu: a stage whose handler computes ~1 ms per event (a fixed amount
//     of work, calibrated at start), offered more than the machine's
//     cores can do; more workers than cores do not help.
//
// Each step runs -step long; the first -warm of it is not measured. One
// table row per controller and step: the mean and final pool size,
// throughput, p90 response time (enqueue to completion) and the events
// the bounded queue refused.
//
// Usage:
//
//	controller-experiment [-workload io,cpu] [-step 15s] [-warm 5s] [-io-rates 50,200,800,1600] [-cpu-rates 1000,4000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

func main() {
	workloads := flag.String("workload", "io,cpu", "workloads to run: io, cpu")
	controllers := flag.String("controllers", "seda,whirlwind", "controller types to compare")
	step := flag.Duration("step", 15*time.Second, "length of each load step")
	warm := flag.Duration("warm", 5*time.Second, "unmeasured start of each step")
	ioRates := flag.String("io-rates", "50,200,800,1600", "events/s of the io workload's steps")
	cpuRates := flag.String("cpu-rates", "1000,4000", "events/s of the cpu workload's steps")
	ioService := flag.Duration("io-service", 10*time.Millisecond, "blocking time per io event")
	cpuService := flag.Duration("cpu-service", time.Millisecond, "CPU time per cpu event (calibrated)")
	maxWorkers := flag.Int("max", 40, "pool max")
	queue := flag.Int("queue", 2000, "queue threshold (capacity)")
	flag.Parse()

	fmt.Printf("# controller-experiment %s, %d cores\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU())
	fmt.Println("| workload | controller | offered ev/s | pool mean | pool end | throughput ev/s | p90 ms | refused |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	for _, w := range split(*workloads) {
		var rates []float64
		var work func()
		switch w {
		case "io":
			rates = floats(*ioRates)
			d := *ioService
			work = func() { time.Sleep(d) }
		case "cpu":
			rates = floats(*cpuRates)
			n := calibrate(*cpuService)
			work = func() { spin(n) }
		default:
			log.Fatalf("unknown workload %q", w)
		}
		for _, c := range split(*controllers) {
			rows, err := run(w, c, rates, work, *step, *warm, *maxWorkers, *queue)
			if err != nil {
				log.Fatal(err)
			}
			for _, r := range rows {
				fmt.Println(r)
			}
		}
	}
}

// run drives one stage under controller typ through the load steps.
func run(workload, typ string, rates []float64, work func(), step, warm time.Duration, maxWorkers, queue int) ([]string, error) {
	m := stage.NewManager(stage.Options{})
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = m.Shutdown(ctx) }()

	var rec recorder
	h := stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			work()
			rec.done(time.Since(e.(time.Time)))
		}
		return nil
	})
	st, err := m.CreateStage(workload+"-"+typ, h, stage.StageConfig{
		Queue:      stage.QueueConfig{Threshold: queue},
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: maxWorkers, Controller: threadpool.ControllerConfig{Type: typ}},
		Batching:   stage.BatchingConfig{Max: 1}, // one event per handler call, as Whirlwind's executors
	})
	if err != nil {
		return nil, err
	}
	var rows []string
	for _, rate := range rates {
		var refused atomic.Uint64
		stop := make(chan struct{})
		var gen sync.WaitGroup
		gen.Add(1)
		go func() {
			defer gen.Done()
			generate(st.Sink(), rate, stop, &refused)
		}()
		time.Sleep(warm)
		rec.reset()
		refused.Store(0)
		var sizes []int
		end := time.Now().Add(step - warm)
		for time.Now().Before(end) {
			time.Sleep(100 * time.Millisecond)
			sizes = append(sizes, st.Pool().Size())
		}
		n, p90 := rec.snapshot()
		close(stop)
		gen.Wait()
		mean := 0.0
		for _, s := range sizes {
			mean += float64(s)
		}
		mean /= float64(max(len(sizes), 1))
		rows = append(rows, fmt.Sprintf("| %s | %s | %.0f | %.1f | %d | %.0f | %.1f | %d |",
			workload, typ, rate, mean, sizes[len(sizes)-1], float64(n)/(step-warm).Seconds(),
			float64(p90)/float64(time.Millisecond), refused.Load()))
	}
	return rows, nil
}

// generate enqueues events (their enqueue time) as a Poisson process of
// the given rate until stop is closed.
func generate(s sink.Sink, rate float64, stop <-chan struct{}, refused *atomic.Uint64) {
	next := time.Now()
	for {
		next = next.Add(time.Duration(rand.ExpFloat64() / rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			select {
			case <-stop:
				return
			case <-time.After(d):
			}
		} else {
			select {
			case <-stop:
				return
			default:
			}
		}
		if err := s.Enqueue(time.Now()); err != nil {
			if !errors.Is(err, sink.ErrRejected) {
				return
			}
			refused.Add(1)
		}
	}
}

// recorder keeps the response times of a measurement window.
type recorder struct {
	mu sync.Mutex
	rt []time.Duration
}

func (r *recorder) done(d time.Duration) {
	r.mu.Lock()
	r.rt = append(r.rt, d)
	r.mu.Unlock()
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.rt = r.rt[:0]
	r.mu.Unlock()
}

func (r *recorder) snapshot() (int, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rt) == 0 {
		return 0, 0
	}
	s := slices.Clone(r.rt)
	slices.Sort(s)
	return len(s), s[len(s)*9/10]
}

var sinkHole atomic.Uint64

// spin does n rounds of integer work.
func spin(n int) {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sinkHole.Add(x & 1)
}

// calibrate returns the rounds of spin that take d on this machine (the
// median of a few tries).
func calibrate(d time.Duration) int {
	const probe = 1 << 20
	var per []float64
	for range 7 {
		start := time.Now()
		spin(probe)
		per = append(per, float64(time.Since(start))/probe)
	}
	slices.Sort(per)
	n := int(float64(d) / per[len(per)/2])
	fmt.Fprintf(os.Stderr, "calibrated: %d rounds ≈ %v\n", n, d)
	return n
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func floats(s string) []float64 {
	var out []float64
	for _, f := range split(s) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			log.Fatalf("bad rate %q", f)
		}
		out = append(out, v)
	}
	return out
}
