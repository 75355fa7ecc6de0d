package enqueuepred

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// stageSim is a discrete-event simulation of a stage on a fake clock: N
// workers take events FIFO from a queue guarded by a predicate, arrivals
// are Poisson at a rate that may change over time, service times come from
// a distribution. The predicate is bound to the simulated queue (Len) and
// gets Done for every completion, as the runtime does.
type stageSim struct {
	workers int
	service func(r *rand.Rand) time.Duration
	rate    func(t time.Duration) float64 // offered events/s at t
	dur     time.Duration
	seed    uint64
	unbound bool // do not Bind the predicate to the queue
}

// simResult holds per-second figures.
type simResult struct {
	admitted, rejected, done []int
	rts                      [][]time.Duration // response times by completion second
	est                      []time.Duration   // the predicate's p90 at the end of each second
	busy                     []time.Duration   // worker time spent serving, per second
}

type simQueueSink struct {
	sink.Sink
	n *int
}

func (s simQueueSink) Len() int { return *s.n }

type simEvent struct {
	at time.Duration
	id int
}

type completion struct {
	at       time.Duration
	e        simEvent
	queued   time.Duration
	service  time.Duration
	workerID int
}

type completions []completion

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].at < c[j].at }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

func (s stageSim) run(p sink.Predicate, clk *fakeClock) *simResult {
	rng := rand.New(rand.NewPCG(s.seed, 7))
	secs := int(s.dur/time.Second) + 1
	res := &simResult{admitted: make([]int, secs), rejected: make([]int, secs), done: make([]int, secs),
		rts: make([][]time.Duration, secs), est: make([]time.Duration, secs), busy: make([]time.Duration, secs)}
	var queue []simEvent
	qlen := 0
	if b, ok := p.(sink.Binder); ok && !s.unbound {
		b.Bind(simQueueSink{n: &qlen})
	}
	idle := s.workers
	var running completions
	now := time.Duration(0)
	nextArr := time.Duration(0)
	nextSec := time.Second
	id := 0
	inf := time.Duration(math.MaxInt64)
	start := func() {
		for idle > 0 && len(queue) > 0 {
			e := queue[0]
			queue = queue[1:]
			qlen = len(queue)
			idle--
			svc := s.service(rng)
			heap.Push(&running, completion{at: now + svc, e: e, queued: now - e.at, service: svc})
			// Account the busy time to the seconds it spans.
			for t, left := now, svc; left > 0; {
				sec := int(t / time.Second)
				end := min(time.Duration(sec+1)*time.Second, t+left)
				if sec < secs {
					res.busy[sec] += end - t
				}
				left -= end - t
				t = end
			}
		}
	}
	for now < s.dur {
		nextDone := inf
		if len(running) > 0 {
			nextDone = running[0].at
		}
		next := min(nextArr, nextDone, nextSec)
		clk.Advance(next - now)
		now = next
		switch {
		case next == nextSec:
			if sec := int(now/time.Second) - 1; sec < secs {
				if rt, ok := p.(interface{ P90() time.Duration }); ok {
					res.est[sec] = rt.P90()
				}
			}
			nextSec += time.Second
		case next == nextDone:
			c := heap.Pop(&running).(completion)
			idle++
			sink.Done(p, c.e, c.queued, c.service)
			sec := int(now / time.Second)
			res.rts[sec] = append(res.rts[sec], now-c.e.at)
			res.done[sec]++
			start()
		default:
			sec := int(now / time.Second)
			e := simEvent{at: now, id: id}
			id++
			if p == nil || p.Accept(e) {
				queue = append(queue, e)
				qlen = len(queue)
				res.admitted[sec]++
				start()
			} else {
				res.rejected[sec]++
			}
			r := s.rate(now)
			nextArr = now + time.Duration(rng.ExpFloat64()/r*float64(time.Second))
		}
	}
	return res
}

// window summarizes seconds [from, to).
func (r *simResult) window(from, to int) (p90rt time.Duration, done, rejected, admitted int) {
	var all []time.Duration
	for s := from; s < to; s++ {
		all = append(all, r.rts[s]...)
		done += r.done[s]
		rejected += r.rejected[s]
		admitted += r.admitted[s]
	}
	return p90(all), done, rejected, admitted
}

func constService(d time.Duration) func(*rand.Rand) time.Duration {
	return func(*rand.Rand) time.Duration { return d }
}

// lognormalService has mean m and a heavy tail (sigma 1: p90 ≈ 2.2 m, p99
// ≈ 6 m).
func lognormalService(m time.Duration) func(*rand.Rand) time.Duration {
	const sigma = 1.0
	mu := math.Log(float64(m)) - sigma*sigma/2
	return func(r *rand.Rand) time.Duration {
		return time.Duration(math.Exp(mu + sigma*r.NormFloat64()))
	}
}

func constRate(r float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return r }
}
