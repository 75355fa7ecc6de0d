package remote_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
)

var (
	compareRounds = flag.Int("remote.rounds", 5, "BenchmarkCompare: rounds, each measuring every variant once")
	comparePhase  = flag.Duration("remote.phase", time.Second, "BenchmarkCompare: how long each variant sends in a round")
	compareOnly   = flag.String("remote.only", "", "BenchmarkCompare: measure only the variants (and their references) matching this regexp")
	compareEach   = flag.Bool("remote.each", false, "BenchmarkCompare: log every phase's measurement, in order")
)

// phase is what one variant measured in one round: events per second
// (until every event was handled) and the process's CPU time and context
// switches per event (both nodes, the server and the reference's
// clients all live in this process).
type phase struct {
	rate     float64 // events/s
	cpu      float64 // µs of user+system CPU per event
	switches float64 // voluntary+involuntary context switches per event
	// perRequest is, for a remote sink's variant, the events its requests
	// carried on average (0 for a reference)
	perRequest float64
}

// variant is one way of moving events: the reference (plain nats.go) or
// a remote sink's. run sends until the deadline and returns how many
// events it sent; the caller waits until that many were handled.
type variant struct {
	name string
	ref  string // the variant this one is compared with ("" for a reference)
	run  func(deadline time.Time) int64
	got  *counter
}

// BenchmarkCompare measures the remote sinks against a plain nats.go
// publisher → queue subscriber moving the same events, interleaved in one
// binary so that each ratio pairs measurements taken seconds apart:
// every round runs each variant for -remote.phase (references and
// remote sinks alternating, the order reversed every other round), and
// the ratio of a round is a variant's rate over its reference's rate in
// that round. It reports each ratio's median (metrics "…-x") and logs
// the median, minimum and maximum of rates, ratios, CPU and context
// switches per event. Run it once: -benchtime 1x.
//
//	go test ./remote -run xxx -bench Compare -benchtime 1x -remote.rounds 7
func BenchmarkCompare(b *testing.B) {
	s, work, na := benchNodes(b, "request")
	nc := plainConn(b, na)
	plainJSON := plainSubscriber(b, nc, "plain.json", decodeSmall)
	plainBinary := plainSubscriber(b, nc, "plain.binary", decodeTiny)
	answered := plainResponder(b, nc, "plain.request")
	pub := na.Conn()

	publish := func(subj string, enc func(i int) []byte) func(time.Time) int64 {
		return func(deadline time.Time) int64 {
			var n int64
			for i := 0; ; i++ {
				if i%256 == 0 && time.Now().After(deadline) {
					return n
				}
				if err := pub.Publish(subj, enc(i)); err != nil {
					b.Fatal(err)
				}
				n++
			}
		}
	}
	enqueue := func(callers int, ev func(i int) sink.Event) func(time.Time) int64 {
		return func(deadline time.Time) int64 {
			return inParallel(callers, deadline, func(i int) int64 {
				if err := s.Enqueue(ev(i)); err != nil {
					b.Error(err)
				}
				return 1
			})
		}
	}
	enqueueMany := func(ev func(i int) sink.Event) func(time.Time) int64 {
		return func(deadline time.Time) int64 {
			return inParallel(8, deadline, func(i int) int64 {
				es := make([]sink.Event, 100)
				for j := range es {
					es[j] = ev(i*100 + j)
				}
				if err := s.EnqueueMany(es); err != nil {
					b.Error(err)
				}
				return int64(len(es))
			})
		}
	}
	// roundTrips is the ceiling of any sender that waits for a verdict:
	// plain nats.go requests (one in flight per goroutine) of per binary
	// events each, answered at once by a queue subscriber that decodes
	// them; no Sandstorm code on either side.
	roundTrips := func(goroutines, per int) func(time.Time) int64 {
		return func(deadline time.Time) int64 {
			return inParallel(goroutines, deadline, func(i int) int64 {
				buf := make([]byte, 0, 5*per)
				for j := range per {
					buf, _ = tiny{ID: uint32(i*per + j), Kind: 'x'}.AppendBinary(buf)
				}
				if _, err := pub.Request("plain.request", buf, 10*time.Second); err != nil {
					b.Error(err)
				}
				return int64(per)
			})
		}
	}
	var binaryBuf []byte
	jsonEvent := func(i int) sink.Event { return small{ID: i, Kind: "x"} }
	binaryEvent := func(i int) sink.Event { return tiny{ID: uint32(i), Kind: 'x'} }
	variants := []variant{
		{name: "plain-json", run: publish("plain.json", func(i int) []byte {
			d, _ := json.Marshal(small{ID: i, Kind: "x"})
			return d
		}), got: plainJSON},
		{name: "enqueue-json", ref: "plain-json", run: enqueue(64, jsonEvent), got: work},
		{name: "many-json", ref: "plain-json", run: enqueueMany(jsonEvent), got: work},
		{name: "plain-binary", run: publish("plain.binary", func(i int) []byte {
			binaryBuf, _ = tiny{ID: uint32(i), Kind: 'x'}.AppendBinary(binaryBuf[:0]) // nats.go copies it
			return binaryBuf
		}), got: plainBinary},
		{name: "enqueue-binary", ref: "plain-binary", run: enqueue(64, binaryEvent), got: work},
		{name: "enqueue-binary-256", ref: "plain-binary", run: enqueue(256, binaryEvent), got: work},
		{name: "enqueue-binary-1024", ref: "plain-binary", run: enqueue(1024, binaryEvent), got: work},
		{name: "many-binary", ref: "plain-binary", run: enqueueMany(binaryEvent), got: work},
		{name: "request-64x1", ref: "plain-binary", run: roundTrips(64, 1), got: answered},
		{name: "request-1x64", ref: "plain-binary", run: roundTrips(1, 64), got: answered},
	}

	if *compareOnly != "" {
		variants = onlyMatching(b, variants, *compareOnly)
	}
	results := map[string][]phase{}
	ratios := map[string][]float64{}
	b.ResetTimer()
	for round := range *compareRounds {
		order := slices.Clone(variants)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]phase{}
		for _, v := range order {
			before, _ := remote.Stats(s)
			m := measure(v)
			if after, _ := remote.Stats(s); v.ref != "" && after.Sent > before.Sent {
				m.perRequest = float64(after.Events-before.Events) / float64(after.Sent-before.Sent)
			}
			got[v.name] = m
			results[v.name] = append(results[v.name], got[v.name])
			if *compareEach {
				b.Logf("round %d %-15s events/s %.0f  cpu µs/event %.2f", round, v.name, got[v.name].rate, got[v.name].cpu)
			}
		}
		for _, v := range variants {
			if v.ref != "" {
				ratios[v.name] = append(ratios[v.name], got[v.name].rate/got[v.ref].rate)
			}
		}
	}
	b.StopTimer()
	for _, v := range variants {
		rates := column(results[v.name], func(p phase) float64 { return p.rate })
		cpu := column(results[v.name], func(p phase) float64 { return p.cpu })
		sw := column(results[v.name], func(p phase) float64 { return p.switches })
		line := fmt.Sprintf("%-15s events/s %s  cpu µs/event %s  switches/event %s",
			v.name, spread(rates, "%.0f"), spread(cpu, "%.2f"), spread(sw, "%.3f"))
		if v.ref != "" {
			r := ratios[v.name]
			per := column(results[v.name], func(p phase) float64 { return p.perRequest })
			line += fmt.Sprintf("  events/request %s  vs %s %s", spread(per, "%.1f"), v.ref, spread(r, "%.2f×"))
			b.ReportMetric(median(r), v.name+"-x")
		}
		b.Log(line)
	}
}

// onlyMatching keeps the variants whose name matches expr, with their
// references.
func onlyMatching(b *testing.B, vs []variant, expr string) []variant {
	re, err := regexp.Compile(expr)
	if err != nil {
		b.Fatal(err)
	}
	keep := map[string]bool{}
	for _, v := range vs {
		if re.MatchString(v.name) {
			keep[v.name], keep[v.ref] = true, true
		}
	}
	return slices.DeleteFunc(vs, func(v variant) bool { return !keep[v.name] })
}

// measure runs v once and returns its rate, CPU and context switches
// per event, counted until every event it sent was handled.
func measure(v variant) phase {
	v.got.n.Store(0)
	before := rusage()
	start := time.Now()
	n := v.run(start.Add(*comparePhase))
	waitCount(v.got, n)
	elapsed := time.Since(start)
	after := rusage()
	return phase{
		rate:     float64(n) / elapsed.Seconds(),
		cpu:      float64(cpuTime(after)-cpuTime(before)) / float64(time.Microsecond) / float64(n),
		switches: float64(after.Nvcsw+after.Nivcsw-before.Nvcsw-before.Nivcsw) / float64(n),
	}
}

// inParallel calls send from g goroutines until the deadline and returns
// the sum of what the calls returned (the events they sent). Each
// goroutine reads the clock every 16 calls (the reference's publisher
// every 256 events): a clock read costs ~0.1 µs here, 5% of an
// Enqueue's CPU when read before every call (profile, 2026-11-27).
func inParallel(g int, deadline time.Time, send func(i int) int64) int64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			var n int64
			for i := w << 24; i%16 != 0 || time.Now().Before(deadline); i++ {
				n += send(i)
			}
			total.Add(n)
		})
	}
	wg.Wait()
	return total.Load()
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

func cpuTime(ru syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func column(ps []phase, f func(phase) float64) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = f(p)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread formats the median of xs and their range: "m [min–max]".
func spread(xs []float64, format string) string {
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", median(xs), slices.Min(xs), slices.Max(xs))
}
