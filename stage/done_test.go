package stage_test

import (
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
