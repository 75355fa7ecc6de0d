package sink_test

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// BenchmarkEnqueueDequeue measures one enqueue plus one dequeue on one
// goroutine, beside the same on a buffered channel.
func BenchmarkEnqueueDequeue(b *testing.B) {
	b.Run("queue", func(b *testing.B) {
		q := sink.NewQueue(1024)
		buf := make([]sink.Event, 1)
		var ev sink.Event = 1
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = q.Enqueue(ev)
			q.Dequeue(buf, nil)
		}
	})
	b.Run("queue+predicate", func(b *testing.B) {
		q := sink.NewQueue(1024)
		q.SetPredicate(sink.PredicateFunc(func(sink.Event) bool { return true }))
		buf := make([]sink.Event, 1)
		var ev sink.Event = 1
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = q.Enqueue(ev)
			q.Dequeue(buf, nil)
		}
	})
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
