package sink_test

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// BenchmarkEnqueueDequeue measures one enqueue plus one dequeue on one
// goroutine, beside the same on a buffered channel.
func BenchmarkEnqueueDequeue(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    sink.Predicate
	}{
		{"queue", nil},
		{"queue+predicate", sink.PredicateFunc(func(sink.Event) bool { return true })},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := sink.NewQueue(1024)
			q.SetPredicate(tc.p)
			buf := make([]sink.Event, 1)
			var ev sink.Event = 1
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = q.Enqueue(ev)
				q.Dequeue(buf, nil)
			}
		})
	}
	b.Run("chan", func(b *testing.B) {
		ch := make(chan sink.Event, 1024)
		var ev sink.Event = 1
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			ch <- ev
			<-ch
		}
	})
}

// BenchmarkRejectFull measures the cost of the overload signal itself.
func BenchmarkRejectFull(b *testing.B) {
	q := sink.NewQueue(1)
	_ = q.Enqueue(0)
	var ev sink.Event = 1
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if q.Enqueue(ev) == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkEnqueue measures Enqueue alone, with and without a predicate,
// from one goroutine and from all: the queue is emptied in bulk every 4096
// events (a few ns per event of the figure), as a busy stage's batches do.
func BenchmarkEnqueue(b *testing.B) {
	const drainEvery = 4096
	for _, tc := range []struct {
		name string
		p    sink.Predicate
	}{
		{"none", nil},
		{"predicate", sink.PredicateFunc(func(sink.Event) bool { return true })},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := sink.NewQueue(0)
			q.SetPredicate(tc.p)
			buf := make([]sink.Event, drainEvery)
			var ev sink.Event = 1
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = q.Enqueue(ev)
				if i%drainEvery == drainEvery-1 {
					q.Dequeue(buf, nil)
				}
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			q := sink.NewQueue(0)
			q.SetPredicate(tc.p)
			var ev sink.Event = 1
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]sink.Event, drainEvery)
				for i := 0; pb.Next(); i++ {
					_ = q.Enqueue(ev)
					if i%drainEvery == drainEvery-1 {
						q.Dequeue(buf, nil)
					}
				}
			})
		})
	}
}

// BenchmarkAdmission measures one admission decision through
// sink.Admission (DESIGN §7: ≤ 50 ns, no allocation), with no predicate,
// with a plain predicate, and with a counting predicate completed at once.
func BenchmarkAdmission(b *testing.B) {
	var ev sink.Event = 1
	for _, tc := range []struct {
		name  string
		p     sink.Predicate
		admit bool
	}{
		{"none", nil, true},
		{"predicate", sink.PredicateFunc(func(sink.Event) bool { return true }), true},
		{"reject", sink.PredicateFunc(func(sink.Event) bool { return false }), false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var a sink.Admission
			if tc.p != nil {
				a.SetPredicate(nil, tc.p)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := a.Admit(ev); (err == nil) != tc.admit {
					b.Fatalf("Admit: %v, want admitted %v", err, tc.admit)
				}
			}
		})
	}
	b.Run("counter+done", func(b *testing.B) {
		var a sink.Admission
		a.SetPredicate(nil, &credit{limit: 1 << 40})
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			t, err := a.Admit(ev)
			if err != nil {
				b.Fatal(err)
			}
			t.Done(ev, 0, 0)
		}
	})
	b.Run("counter+done/parallel", func(b *testing.B) {
		var a sink.Admission
		a.SetPredicate(nil, &credit{limit: 1 << 40})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				t, err := a.Admit(ev)
				if err != nil {
					b.Fatal(err)
				}
				t.Done(ev, 0, 0)
			}
		})
	})
}
