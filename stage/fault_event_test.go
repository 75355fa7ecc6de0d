package stage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestEventErrorEveryTenth: with default batching, a handler that pins a
// failure on every tenth event (EventError) loses no other event, and its
// monitor sees exactly the failed events, one failure each.
func TestEventErrorEveryTenth(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 2}})
			const n = 2000
			var seen [n]atomic.Int32
			var biggest atomic.Int32
			h := stage.HandlerFunc(func(b []sink.Event) error {
				for {
					if x := biggest.Load(); int32(len(b)) <= x || biggest.CompareAndSwap(x, int32(len(b))) {
						break
					}
				}
				var errs []error
				for i, e := range b {
					v := e.(int)
					if v%10 == 9 {
						errs = append(errs, stage.FailEvent(i, fmt.Errorf("event %d: %w", v, errBad)))
						continue
					}
					seen[v].Add(1)
				}
				return errors.Join(errs...)
			})
			st, err := m.CreateStage("Fragile", h, stage.StageConfig{})
			if err != nil {
				t.Fatal(err)
			}
			mon := newChanSink(2 * n)
			if _, err := m.Monitor("Fragile", mon); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n/2; i++ { // a backlog, so that batches are large
				if err := st.Sink().Enqueue(i); err != nil {
					t.Fatal(err)
				}
			}
			started(t, m)
			for i := n / 2; i < n; i++ {
				if err := st.Sink().Enqueue(i); err != nil {
					t.Fatal(err)
				}
			}
			shutdown(t, m)
			if biggest.Load() < 10 {
				t.Fatalf("largest batch %d: the test needs batches holding a failing event and others", biggest.Load())
			}
			events := mon.rest()
			checkEveryTenthFailed(t, seen[:], events[:len(events)-1], func(f stage.StageFailed) {
				if f.Whole || len(f.Events) != 1 || !errors.Is(f.Err, errBad) || f.Instance != 1 {
					t.Fatalf("failure %+v", f)
				}
				v := f.Events[0].(int)
				if f.Err.Error() != fmt.Sprintf("event %d: %v", v, errBad) {
					t.Fatalf("failure of event %d carries %q", v, f.Err)
				}
			})
			if !isTerminated(events[len(events)-1]) {
				t.Fatalf("last monitor event %#v", events[len(events)-1])
			}
			if s := st.Stats(); s.Failures != n/10 {
				t.Fatalf("%d failures counted, want %d", s.Failures, n/10)
			}
		})
	}
}

// TestWholeBatchFailure: a panic or an error naming no event (or an event
// outside the batch) fails the batch as a whole: the failure holds every
// event of the batch, in the order handed out, and says so.
func TestWholeBatchFailure(t *testing.T) {
	tests := []struct {
		name string
		fail func(b []sink.Event) error
		is   error
	}{
		{"panic", func([]sink.Event) error { panic("at event 2") }, stage.ErrHandlerPanic},
		{"plain error", func([]sink.Event) error { return errBad }, errBad},
		{"index out of range", func(b []sink.Event) error { return stage.FailEvent(len(b), errBad) }, errBad},
		{"mixed join", func([]sink.Event) error { return errors.Join(stage.FailEvent(1, errBad), errBad) }, errBad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := stage.NewManager(stage.Options{})
			var mu sync.Mutex
			var batches [][]int
			h := stage.HandlerFunc(func(b []sink.Event) error {
				var got []int
				for _, e := range b {
					got = append(got, e.(int))
				}
				slices.Reverse(b) // the handler owns its batch
				mu.Lock()
				batches = append(batches, got)
				mu.Unlock()
				return tt.fail(b)
			})
			st, err := m.CreateStage("S", h, stage.StageConfig{
				Batching:   stage.BatchingConfig{Max: 4},
				ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			mon := newChanSink(10)
			_, _ = m.Monitor("S", mon)
			for i := 0; i < 4; i++ {
				_ = st.Sink().Enqueue(i)
			}
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			shutdown(t, m)
			if len(batches) != 1 || len(batches[0]) != 4 {
				t.Fatalf("batches %v, want one of 4", batches)
			}
			f, ok := mon.next(t).(stage.StageFailed)
			if !ok || !f.Whole || !errors.Is(f.Err, tt.is) {
				t.Fatalf("failure %+v", f)
			}
			got := make([]int, len(f.Events))
			for i, e := range f.Events {
				got[i] = e.(int)
			}
			if !slices.Equal(got, batches[0]) {
				t.Fatalf("failure holds %v, want the batch %v", got, batches[0])
			}
			if st.Stats().Failures != 1 {
				t.Fatalf("%d failures", st.Stats().Failures)
			}
		})
	}
}

// TestLinkedFailureOnlyFailedPrincipal: in batches holding several
// principals, an EventError cancels the queued events of the failed
// event's principal only; the other sessions go on.
func TestLinkedFailureOnlyFailedPrincipal(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	var mu sync.Mutex
	var handled []string
	var biggest int
	h := stage.HandlerFunc(func(b []sink.Event) error {
		mu.Lock()
		defer mu.Unlock()
		biggest = max(biggest, len(b))
		for i, e := range b {
			ev := e.(msg)
			if ev.seq < 0 {
				return stage.FailEvent(i, errBad) // handled nothing after it: the test asks nothing of them
			}
			handled = append(handled, fmt.Sprintf("%s%d", ev.session, ev.seq))
		}
		return nil
	})
	st, err := m.CreateStage("Sessions", h, stage.StageConfig{
		Ordering:   stage.OrderingConfig{Key: stage.KeyPrincipal, Linked: true},
		Batching:   stage.BatchingConfig{Max: 8},
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	mon := newChanSink(10)
	_, _ = m.Monitor("Sessions", mon)
	// One batch takes the first event of each session: p's fails last in
	// it, so q's and r's in the same batch are handled.
	for _, ev := range []msg{
		{session: "q", seq: 1}, {session: "r", seq: 1}, {session: "p", seq: -1},
		{session: "q", seq: 2}, {session: "p", seq: 2}, {session: "r", seq: 2}, {session: "p", seq: 3},
	} {
		_ = st.Sink().Enqueue(ev)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := mon.next(t).(stage.StageFailed)
	if first.Whole || len(first.Events) != 1 || first.Events[0].(msg).session != "p" {
		t.Fatalf("first failure %+v", first)
	}
	linked := mon.next(t).(stage.StageFailed)
	var le *stage.LinkedError
	if !errors.As(linked.Err, &le) || !slices.Equal(le.Principals, []string{"p"}) || !errors.Is(le.Cause, errBad) {
		t.Fatalf("linked failure %+v", linked)
	}
	if len(linked.Events) != 2 || linked.Events[0].(msg).seq != 2 || linked.Events[1].(msg).seq != 3 {
		t.Fatalf("cancelled %v, want p2 and p3", linked.Events)
	}
	shutdown(t, m)
	if biggest != 3 {
		t.Fatalf("first batch held %d events, want one per session", biggest)
	}
	slices.Sort(handled)
	if !slices.Equal(handled, []string{"q1", "q2", "r1", "r2"}) {
		t.Fatalf("handled %v", handled)
	}
	if s := st.Stats(); s.Linked != 2 || s.Failures != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// loggedOrder is an event that chooses what the log shows of it.
type loggedOrder struct {
	id     int
	secret string
}

func (o loggedOrder) LogValue() slog.Value { return slog.GroupValue(slog.Int("id", o.id)) }

// TestFailureLogEvents: the failure log shows an event through its
// LogValue if it has one, else only its type, never its payload.
func TestFailureLogEvents(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ev        sink.Event
		want, not []string
	}{
		{"LogValuer", loggedOrder{id: 7, secret: "hunter2"}, []string{"event.id=7"}, []string{"hunter2", "event.type"}},
		{"plain payload", []byte("password=hunter2"), []string{"event.type=[]uint8"}, []string{"hunter2", "password"}},
		{"number", 12345, []string{"event.type=int"}, []string{"12345", "         "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return buf.Write(p)
			}), nil))
			failed := make(chan struct{}, 1)
			m := stage.NewManager(stage.Options{Logger: log, OnFailure: func(stage.Failure) { failed <- struct{}{} }})
			st, err := m.CreateStage("S", stage.HandlerFunc(func([]sink.Event) error { return errors.New("boom") }), stage.StageConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := st.Sink().Enqueue(tc.ev); err != nil {
				t.Fatal(err)
			}
			<-failed
			if err := m.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			out := buf.String()
			mu.Unlock()
			var line string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "stage handler failed") {
					line = l
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("failure log %q lacks %q", line, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(line, n) {
					t.Errorf("failure log %q shows %q", line, n)
				}
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
