package enqueuepred

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// The admission decision budget is 50 ns with no allocation (DESIGN §7).

func BenchmarkThreshold(b *testing.B) {
	q := sink.NewQueue(0)
	th := newThreshold(1 << 30)
	q.SetPredicate(th)
	var e sink.Event = 1
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			th.Accept(e)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				th.Accept(e)
			}
		})
	})
}

func BenchmarkRate(b *testing.B) {
	var e sink.Event = 1
	for _, tc := range []struct {
		name   string
		rate   float64
		shards int
	}{
		{"admit", 1e9, 0},   // always a token (1 per ns)
		{"reject", 1e-3, 0}, // never a token after the first 1000
		{"mixed", 5e6, 0},
		{"admit-sharded", 1e9, 8}, // RateConfig.Shards: cores take from different words
		{"reject-sharded", 1e-3, 8},
	} {
		r := NewRate(RateConfig{Rate: tc.rate, Depth: 1000, Shards: tc.shards})
		b.Run(tc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r.Accept(e)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r.Accept(e)
				}
			})
		})
	}
}

func BenchmarkCounter(b *testing.B) {
	c := newCounter(1 << 30)
	var e sink.Event = 1
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Accept(e)
			sink.Done(c, e, 0, 0)
		}
	})
}

func BenchmarkResponseTime(b *testing.B) {
	r, _ := NewResponseTime(RTConfig{Target: time.Second, RateMax: 1e12, InitialRate: 1e12})
	var e sink.Event = 1
	b.Run("accept", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Accept(e)
			}
		})
	})
	b.Run("accept+done", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Accept(e)
				sink.Done(r, e, time.Millisecond, time.Millisecond)
			}
		})
	})
}

func BenchmarkQueueEnqueue(b *testing.B) {
	// Whole enqueue path through sink.Queue with and without a rate bucket.
	for _, tc := range []struct {
		name string
		p    sink.Predicate
	}{
		{"none", nil},
		{"rate", NewRate(RateConfig{Rate: 1e9, Depth: 1000})},
		{"threshold", newThreshold(1 << 30)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := sink.NewQueue(0)
			q.SetPredicate(tc.p)
			buf := make([]sink.Event, 1)
			var e sink.Event = 1
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = q.Enqueue(e)
				q.Dequeue(buf, nil)
			}
		})
	}
}

// BenchmarkAdmissionTicket is one admission decision and its completion
// through sink.Admission, as every sink makes them: a counter alone, and
// the same counter inside wrappers, whose hooks the Admission found once
// at SetPredicate (no forwarding per event).
func BenchmarkAdmissionTicket(b *testing.B) {
	var e sink.Event = 1
	for _, tt := range []struct {
		name string
		p    sink.Predicate
	}{
		{"counter", newCounter(1 << 30)},
		{"session(all(counter))", newSession(newAll(newCounter(1<<30)), SessionConfig{})},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var a sink.Admission
			a.SetPredicate(nil, tt.p)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				t, err := a.Admit(e)
				if err != nil {
					b.Fatal(err)
				}
				t.Done(e, 0, 0)
			}
		})
	}
}
