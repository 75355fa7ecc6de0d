package stage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Completion feedback: every admitted event is settled exactly once.

// ledger is a predicate that admits everything and records, per event,
// how many times it was admitted, completed (Done) and cancelled.
type ledger struct {
	mu       sync.Mutex
	admitted map[sink.Event]int
	settled  map[sink.Event]int
	unknown  []sink.Event // Done or Cancel for an event never admitted
}

func newLedger() *ledger {
	return &ledger{admitted: map[sink.Event]int{}, settled: map[sink.Event]int{}}
}

func (l *ledger) Accept(e sink.Event) bool {
	l.mu.Lock()
	l.admitted[e]++
	l.mu.Unlock()
	return true
}

func (l *ledger) settle(e sink.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.admitted[e] == 0 {
		l.unknown = append(l.unknown, e)
		return
	}
	l.settled[e]++
}

func (l *ledger) Done(e sink.Event, _, _ time.Duration) { l.settle(e) }
func (l *ledger) Cancel(e sink.Event)                   { l.settle(e) }

// check fails t unless every admitted event was settled exactly once.
func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.unknown) > 0 {
		t.Errorf("Done/Cancel for %d events never admitted, e.g. %v", len(l.unknown), l.unknown[0])
	}
	bad := 0
	for e, n := range l.admitted {
		if got := l.settled[e]; got != n {
			if bad++; bad <= 3 {
				t.Errorf("event %v: admitted %d times, settled %d times", e, n, got)
			}
		}
	}
	if bad > 3 {
		t.Errorf("... %d events settled wrongly in all", bad)
	}
}

// TestDoneGetsTheAdmittedEvents: a handler may reorder or overwrite its
// batch (it is the handler's slice until it returns); the predicate must
// still be told about the events it admitted, each exactly once.
func TestDoneGetsTheAdmittedEvents(t *testing.T) {
	rewrites := []struct {
		name string
		f    func([]sink.Event)
	}{
		{"clear", func(b []sink.Event) { clear(b) }},
		{"reverse", func(b []sink.Event) {
			for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
				b[i], b[j] = b[j], b[i]
			}
		}},
		{"overwrite", func(b []sink.Event) {
			for i := range b {
				b[i] = "scratch"
			}
		}},
	}
	for _, fail := range []bool{false, true} {
		for _, rw := range rewrites {
			t.Run(fmt.Sprintf("%s/fail=%v", rw.name, fail), func(t *testing.T) {
				m := stage.NewManager(stage.Options{})
				l := newLedger()
				var handled atomic.Int64
				h := stage.HandlerFunc(func(b []sink.Event) error {
					handled.Add(int64(len(b)))
					rw.f(b)
					if fail {
						return errors.New("boom")
					}
					return nil
				})
				st, err := m.CreateStage("S", h, stage.StageConfig{Predicate: l, Batching: stage.BatchingConfig{Max: 8}})
				if err != nil {
					t.Fatal(err)
				}
				const n = 200
				for i := 0; i < n; i++ { // queued before Start: full batches
					if err := st.Sink().Enqueue(i); err != nil {
						t.Fatal(err)
					}
				}
				started(t, m)
				shutdown(t, m)
				if handled.Load() != n {
					t.Fatalf("handled %d events, want %d", handled.Load(), n)
				}
				l.check(t)
			})
		}
	}
}

// TestFailureReportsTheBatchAsHandedOut: Failure.Events (and so linked
// cancellation) are the events of the batch, not what the handler left in
// the slice.
func TestFailureReportsTheBatchAsHandedOut(t *testing.T) {
	var mu sync.Mutex
	var failed []sink.Event
	m := stage.NewManager(stage.Options{OnFailure: func(f stage.Failure) {
		mu.Lock()
		failed = append(failed, f.Events...)
		mu.Unlock()
	}})
	h := stage.HandlerFunc(func(b []sink.Event) error {
		clear(b)
		return errors.New("boom")
	})
	st, err := m.CreateStage("S", h, stage.StageConfig{Batching: stage.BatchingConfig{Max: 4}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		_ = st.Sink().Enqueue(i)
	}
	started(t, m)
	shutdown(t, m)
	mu.Lock()
	defer mu.Unlock()
	seen := map[sink.Event]bool{}
	for _, e := range failed {
		seen[e] = true
	}
	for i := 0; i < 10; i++ {
		if !seen[i] {
			t.Fatalf("failure reports %v, missing event %d", failed, i)
		}
	}
}

// TestDoneAfterPredicateReplacement: replacing a stage's predicate while
// traffic flows, every event still completes on the predicate that
// admitted it (a Counter or a cost predicate would otherwise get credits it
// never gave, and the replaced one would keep them).
func TestDoneAfterPredicateReplacement(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("S", stage.HandlerFunc(func(b []sink.Event) error {
		time.Sleep(20 * time.Microsecond) // let events wait across replacements
		return nil
	}), stage.StageConfig{Batching: stage.BatchingConfig{Max: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ledgers := []*ledger{newLedger(), newLedger(), newLedger()}
	st.Sink().SetPredicate(ledgers[0])
	var wg sync.WaitGroup
	var next atomic.Int64
	const producers, each = 4, 2000
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := st.Sink().Enqueue(int(next.Add(1))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// Fewer replacements than the queue remembers (8), spread over the run.
	for i := 1; i <= 6; i++ {
		time.Sleep(2 * time.Millisecond)
		st.Sink().SetPredicate(ledgers[i%len(ledgers)])
	}
	wg.Wait()
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, l := range ledgers {
		t.Run(fmt.Sprint("ledger", i), l.check)
		l.mu.Lock()
		for _, n := range l.admitted {
			total += n
		}
		l.mu.Unlock()
	}
	if total != producers*each {
		t.Fatalf("admitted %d events in all, want %d", total, producers*each)
	}
}
