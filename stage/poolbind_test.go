package stage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestSaturatedFollowsStagePool: a `saturated` predicate follows its
// stage's real thread pool, not a count of events against threads (4 in
// both stages). On "grow" one worker of at most 4 holds a batch of 10
// events: the pool can still grow, so an enqueue is admitted although the
// inner predicate refuses everything. On "fixed" the pool is pinned to
// one busy worker holding one event: it cannot grow, so the inner
// predicate refuses, as it does for a predicate installed at run time.
func TestSaturatedFollowsStagePool(t *testing.T) {
	const doc = `
stages:
  grow:
    handler: test.Block
    batching: {max: 10}
    threadpool: {min: 1, max: 4, controller: {interval: 1h}}
    predicate: {type: all, of: [{type: saturated, threads: 4, of: {type: threshold, limit: 0}}]}
  fixed:
    handler: test.Block
    threadpool: {min: 1, max: 1}
    predicate: {type: saturated, threads: 4, of: {type: threshold, limit: 0}}
`
	type batch struct {
		first sink.Event
		n     int
	}
	started, release := make(chan batch, 100), make(chan struct{}) // room for every batch
	r := stage.NewRegistry()
	r.Register("test.Block", func() stage.Handler {
		return stage.HandlerFunc(func(b []sink.Event) error {
			started <- batch{b[0], len(b)}
			<-release
			return nil
		})
	})
	m, err := stage.Parse([]byte(doc), r)
	if err != nil {
		t.Fatal(err)
	}
	grow, _ := m.Stage("grow")
	fixed, _ := m.Stage("fixed")
	// Before Start the pools have no workers yet, and can grow.
	for i := range 20 {
		if err := grow.Sink().Enqueue(i); err != nil {
			t.Fatalf("grow: event %d refused before start: %v", i, err)
		}
	}
	if err := fixed.Sink().Enqueue("fixed"); err != nil {
		t.Fatalf("fixed: refused before start: %v", err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		if err := m.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	for range 2 {
		if b := <-started; b.first == "fixed" && b.n != 1 || b.first != "fixed" && b.n != 10 {
			t.Fatalf("batch of %d from %v", b.n, b.first)
		}
	}

	if size, limit := grow.Pool().Size(), grow.Pool().Limit(); size != 1 || limit != 4 {
		t.Fatalf("grow: pool at %d of %d, want 1 of 4", size, limit)
	}
	if err := grow.Sink().Enqueue("more"); err != nil {
		t.Fatalf("grow: refused while the pool can grow: %v", err)
	}

	var rej *sink.RejectError
	if err := fixed.Sink().Enqueue("more"); !errors.As(err, &rej) {
		t.Fatalf("fixed: %v, want refused with the pool unable to grow", err)
	}
	fixed.Sink().(interface{ SetPredicate(sink.Predicate) }).SetPredicate(
		enqueuepred.NewSaturated(enqueuepred.NewThreshold(0), 4))
	if err := fixed.Sink().Enqueue("more"); !errors.As(err, &rej) {
		t.Fatalf("fixed, predicate set at run time: %v, want refused", err)
	}
}
