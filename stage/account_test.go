package stage_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// principaled is an event of a principal.
type principaled struct {
	n  int
	id string
}

func (p *principaled) Principal() enqueuepred.Principal { return enqueuepred.Principal{ID: p.id} }

// batchClock is a Completer (not a ServiceSharer) that records the
// service time the runtime measured for each event: its batch's time.
type batchClock struct {
	mu      sync.Mutex
	service map[sink.Event]time.Duration
}

func (b *batchClock) Accept(sink.Event) bool { return true }
func (b *batchClock) Done(e sink.Event, _, service time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.service[e] = service
}

// TestAccountingChargesEachEventItsShare: one batch of 10 events, 4 of
// alice's and 6 of bob's, is charged to the accounting predicate as the
// batch's handler time split evenly between its events (the runtime cannot
// see inside a handler): alice 4/10 of it and bob 6/10, together the
// batch's time, not 10 times it as when every event was charged the whole
// batch. The batch's time is whatever the runtime measured (told to a
// plain Completer beside the accounting), so no timing decides the test.
func TestAccountingChargesEachEventItsShare(t *testing.T) {
	clock := &batchClock{service: map[sink.Event]time.Duration{}}
	acct := enqueuepred.NewAccounting(nil, enqueuepred.AccountingConfig{})
	m := stage.NewManager(stage.Options{})
	var batches []int
	st, err := m.CreateStage("S", stage.HandlerFunc(func(b []sink.Event) error {
		batches = append(batches, len(b)) // one goroutine: ThreadPool max 1
		return nil
	}), stage.StageConfig{
		Predicate:  enqueuepred.NewAll(clock, acct),
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1},
		Batching:   stage.BatchingConfig{Max: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	var events []sink.Event
	for i := range 10 {
		id := "bob"
		if i < 4 {
			id = "alice"
		}
		events = append(events, &principaled{i, id})
	}
	if err := st.Sink().EnqueueMany(events); err != nil { // queued before Start: one batch
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil { // drains
		t.Fatal(err)
	}
	if len(batches) != 1 || batches[0] != 10 {
		t.Fatalf("batches %v, want one of 10", batches)
	}
	batch := clock.service[events[0]]
	for _, e := range events {
		if clock.service[e] != batch {
			t.Fatalf("events of one batch told different service times: %v", clock.service)
		}
	}
	got := map[string]float64{}
	acct.(enqueuepred.Inspector).Inspect(func(k string, v float64) { got[k] = v })
	share := batch / 10
	for id, n := range map[string]int{"alice": 4, "bob": 6} {
		if d := got["principal."+id+".done"]; d != float64(n) {
			t.Errorf("%s: %v events done, want %d", id, d, n)
		}
		want := (time.Duration(n) * share).Seconds()
		if s := got["principal."+id+".service_s"]; s != want {
			t.Errorf("%s charged %vs for %d events of a %v batch, want %vs (its share)", id, s, n, batch, want)
		}
	}
	sum := time.Duration((got["principal.alice.service_s"] + got["principal.bob.service_s"]) * 1e9)
	if d := sum - batch; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("charged %v for a %v batch, want the batch's time", sum, batch)
	}
}
