package stage_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// The benchmarks below measure the runtime beside the same shape built from
// plain Go channels, in the same run (DESIGN §7): compare the sub-benchmarks'
// ns/op, never an absolute figure.

const ringSize = 10

// hopper forwards every event to the next stage of a ring, counting hops
// down; the last hop signals done.
type hopper struct {
	next string
	out  sink.Sink
	done chan struct{}
}

func (h *hopper) Init(c *stage.Context) (err error) {
	h.out, err = c.Sink(h.next)
	return err
}

func (h *hopper) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		left := e.(*int)
		if *left == 0 {
			h.done <- struct{}{}
			continue
		}
		*left--
		if err := h.out.Enqueue(left); err != nil {
			return err
		}
	}
	return nil
}

// startBench starts m, shut down when the benchmark ends, and returns the
// sink of its stage first.
func startBench(b *testing.B, m *stage.Manager, first string) sink.Sink {
	b.Helper()
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	st, ok := m.Stage(first)
	if !ok {
		b.Fatalf("no stage %s", first)
	}
	return st.Sink()
}

// benchChans makes the n channels of a channel reference.
func benchChans(n int) []chan sink.Event {
	chans := make([]chan sink.Event, n)
	for i := range chans {
		chans[i] = make(chan sink.Event, 1024)
	}
	return chans
}

// stopChans closes the channels of a channel reference and waits for
// its goroutines, counted by wg, to end.
func stopChans(chans []chan sink.Event, wg *sync.WaitGroup) {
	for _, c := range chans {
		close(c)
	}
	wg.Wait()
}

// BenchmarkHop measures one event hopping around a ring of 10 stages with
// one event in flight: ns/op is the cost of one hop (enqueue → handler on
// another goroutine).
func BenchmarkHop(b *testing.B) {
	b.Run("stages", func(b *testing.B) {
		m := stage.NewManager(stage.Options{})
		done := make(chan struct{})
		for i := 0; i < ringSize; i++ {
			h := &hopper{next: fmt.Sprintf("S%d", (i+1)%ringSize), done: done}
			if _, err := m.CreateStage(fmt.Sprintf("S%d", i), h, stage.StageConfig{}); err != nil {
				b.Fatal(err)
			}
		}
		first := startBench(b, m, "S0")
		left := b.N
		b.ReportAllocs()
		b.ResetTimer()
		if err := first.Enqueue(&left); err != nil {
			b.Fatal(err)
		}
		<-done
	})
	b.Run("channels", func(b *testing.B) {
		chans := benchChans(ringSize)
		done := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < ringSize; i++ {
			wg.Add(1)
			go func(in, out chan sink.Event) {
				defer wg.Done()
				for e := range in {
					left := e.(*int)
					if *left == 0 {
						done <- struct{}{}
						continue
					}
					*left--
					out <- left
				}
			}(chans[i], chans[(i+1)%ringSize])
		}
		left := b.N
		b.ReportAllocs()
		b.ResetTimer()
		chans[0] <- &left
		<-done
		b.StopTimer()
		stopChans(chans, &wg)
	})
}

// relay forwards every event to the next stage of a line; the last one
// signals done.
type relay struct {
	next string
	out  sink.Sink
	done chan struct{}
}

func (h *relay) Init(c *stage.Context) (err error) {
	if h.next != "" {
		h.out, err = c.Sink(h.next)
	}
	return err
}

func (h *relay) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		if h.out == nil {
			h.done <- struct{}{}
			continue
		}
		if err := h.out.Enqueue(e); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkHopOutside measures the other ring shape: a goroutine outside
// the runtime enqueues one event into the first of 10 default-configured
// stages, the last one signals a done channel, and the driver sends the
// next: one event in flight. ns/op is one hop (the driver's enqueue and
// the done signal count as hops, 11 a lap).
func BenchmarkHopOutside(b *testing.B) {
	const hops = ringSize + 1
	var ev sink.Event = 1
	b.Run("stages", func(b *testing.B) {
		m := stage.NewManager(stage.Options{})
		done := make(chan struct{})
		for i := 0; i < ringSize; i++ {
			next := ""
			if i < ringSize-1 {
				next = fmt.Sprintf("S%d", i+1)
			}
			if _, err := m.CreateStage(fmt.Sprintf("S%d", i), &relay{next: next, done: done}, stage.StageConfig{}); err != nil {
				b.Fatal(err)
			}
		}
		first := startBench(b, m, "S0")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += hops {
			if err := first.Enqueue(ev); err != nil {
				b.Fatal(err)
			}
			<-done
		}
	})
	b.Run("channels", func(b *testing.B) {
		chans := benchChans(ringSize)
		done := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < ringSize; i++ {
			wg.Add(1)
			go func(in chan sink.Event, i int) {
				defer wg.Done()
				for e := range in {
					if i == ringSize-1 {
						done <- struct{}{}
						continue
					}
					chans[i+1] <- e
				}
			}(chans[i], i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += hops {
			chans[0] <- ev
			<-done
		}
		b.StopTimer()
		stopChans(chans, &wg)
	})
}

// passer forwards whole batches to the next stage, waiting (back-pressure)
// while it is full.
type passer struct {
	next string
	out  sink.Sink
	last chan int
}

func (p *passer) Init(c *stage.Context) (err error) {
	if p.next != "" {
		p.out, err = c.Sink(p.next)
	}
	return err
}

func (p *passer) HandleEvents(batch []sink.Event) error {
	if p.out == nil {
		p.last <- len(batch)
		return nil
	}
	return sink.WaitPolicy{}.EnqueueManyWait(context.Background(), p.out, batch)
}

// BenchmarkPipeline measures events/s through a 10-stage pipeline with
// batching, beside a 10-goroutine channel pipeline passing events one by
// one. ns/op is per event end to end.
func BenchmarkPipeline(b *testing.B) {
	const stages, chunk = 10, 256
	var ev sink.Event = 1
	// chunk: how the producer feeds the first stage: 256 events per
	// EnqueueMany, or one Enqueue per event like the channel reference.
	// The default configuration (StageConfig{}) is fed one Enqueue per
	// event, like the channel reference.
	batched := stage.StageConfig{
		Queue:    stage.QueueConfig{Threshold: 8192},
		Batching: stage.BatchingConfig{Max: 1024},
	}
	for _, in := range []struct {
		name  string
		chunk int
		cfg   stage.StageConfig
	}{{"stages-batched", chunk, batched}, {"stages-batched-single-input", 1, batched}, {"stages-default", 1, stage.StageConfig{}}} {
		b.Run(in.name, func(b *testing.B) {
			m := stage.NewManager(stage.Options{})
			last := make(chan int, 1024)
			for i := 0; i < stages; i++ {
				next := ""
				if i < stages-1 {
					next = fmt.Sprintf("P%d", i+1)
				}
				_, err := m.CreateStage(fmt.Sprintf("P%d", i), &passer{next: next, last: last}, in.cfg)
				if err != nil {
					b.Fatal(err)
				}
			}
			first := startBench(b, m, "P0")
			batch := make([]sink.Event, in.chunk)
			for i := range batch {
				batch[i] = ev
			}
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				ctx := context.Background()
				for sent := 0; sent < b.N; sent += in.chunk {
					n := min(in.chunk, b.N-sent)
					var err error
					if n == 1 {
						err = sink.EnqueueWait(ctx, first, ev)
					} else {
						err = (sink.WaitPolicy{}).EnqueueManyWait(ctx, first, batch[:n])
					}
					if err != nil {
						panic(err)
					}
				}
			}()
			for got := 0; got < b.N; {
				got += <-last
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
	b.Run("channels", func(b *testing.B) {
		chans := benchChans(stages + 1)
		for i := 0; i < stages; i++ {
			go func(in, out chan sink.Event) {
				for e := range in {
					out <- e
				}
				close(out)
			}(chans[i], chans[i+1])
		}
		b.ReportAllocs()
		b.ResetTimer()
		go func() {
			for i := 0; i < b.N; i++ {
				chans[0] <- ev
			}
			close(chans[0])
		}()
		for range chans[stages] {
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkDispatch measures a paced stage (queue.dispatch) draining a
// backlog: "unpaced" is the same stage without a rate, "paced" has a rate
// no backlog reaches (the regulator's own cost per event), and "rate"
// drains at 100 000 events/s in bursts of 100, so its ns/op is about the
// 10 µs per event the rate allows: the regulator keeps the rate.
func BenchmarkDispatch(b *testing.B) {
	for _, tc := range []struct {
		name string
		q    stage.QueueConfig
	}{
		{"unpaced", stage.QueueConfig{}},
		{"paced", stage.QueueConfig{Dispatch: 1e9, Burst: 1000}},
		{"rate", stage.QueueConfig{Dispatch: 1e5, Burst: 100}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := stage.NewManager(stage.Options{})
			var wg sync.WaitGroup
			h := stage.HandlerFunc(func(batch []sink.Event) error {
				wg.Add(-len(batch))
				return nil
			})
			st, err := m.CreateStage("S", h, stage.StageConfig{Queue: tc.q, ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1}})
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(b.N)
			for i := 0; i < b.N; i++ {
				if err := st.Sink().Enqueue(i); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := m.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			wg.Wait()
			b.StopTimer()
			_ = m.Shutdown(context.Background())
		})
	}
}
