package stage_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestMaxTime: events queued before Start wait longer than a 1 ns age
// limit, so none is handled; each is counted, cancelled on the predicate
// that admitted it and logged. With a limit of an hour all are handled.
func TestMaxTime(t *testing.T) {
	for _, tc := range []struct {
		maxTime     time.Duration
		wantHandled int64
	}{{time.Nanosecond, 0}, {time.Hour, 100}, {0, 100}} {
		var logs bytes.Buffer
		m := stage.NewManager(stage.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		l := newLedger()
		var handled atomic.Int64
		h := stage.HandlerFunc(func(b []sink.Event) error { handled.Add(int64(len(b))); return nil })
		st, err := m.CreateStage("S", h, stage.StageConfig{Predicate: l, Queue: stage.QueueConfig{MaxTime: tc.maxTime},
			Batching: stage.BatchingConfig{Max: 8}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if err := st.Sink().Enqueue(i); err != nil {
				t.Fatal(err)
			}
		}
		started(t, m)
		shutdown(t, m)
		q := st
		if handled.Load() != tc.wantHandled || int64(q.Expired()) != 100-tc.wantHandled {
			t.Errorf("max_time %v: handled %d, expired %d; want %d handled", tc.maxTime, handled.Load(), q.Expired(), tc.wantHandled)
		}
		l.check(t)
		if warned := strings.Contains(logs.String(), "events expired in queue"); warned != (tc.wantHandled < 100) {
			t.Errorf("max_time %v: expiry logged %v:\n%s", tc.maxTime, warned, logs.String())
		}
	}
}

func TestMaxTimeConfig(t *testing.T) {
	_, err := stage.NewManager(stage.Options{}).CreateStage("S", stage.HandlerFunc(func([]sink.Event) error { return nil }),
		stage.StageConfig{Queue: stage.QueueConfig{MaxTime: -time.Second}})
	if !errors.Is(err, stage.ErrInvalidConfig) || !strings.Contains(err.Error(), "queue.max_time") {
		t.Fatalf("negative max_time: %v", err)
	}
	cfg, err := stage.ParseConfig([]byte("stages:\n  S:\n    handler: x\n    queue: {threshold: 10, max_time: 250ms}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Stages[0].Config.Queue.MaxTime; got != 250*time.Millisecond {
		t.Fatalf("max_time %v", got)
	}
	_, err = stage.ParseConfig([]byte("stages:\n  S:\n    handler: x\n    queue: {max_time: -1s}\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "max_time") {
		t.Fatalf("negative max_time in YAML: %v", err)
	}
}

// TestDispatchRate: with queue.dispatch every handled event goes through
// the stage's pacer (no timing is asserted: the rate is high enough never
// to wait).
func TestDispatchRate(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	var handled atomic.Int64
	h := stage.HandlerFunc(func(b []sink.Event) error { handled.Add(int64(len(b))); return nil })
	st, err := m.CreateStage("S", h, stage.StageConfig{Queue: stage.QueueConfig{Dispatch: 1e9, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := st.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	started(t, m)
	shutdown(t, m)
	paced := -1.0
	st.Pacer().Inspect(func(name string, v float64) {
		if name == "paced" {
			paced = v
		}
	})
	if handled.Load() != 50 || paced != 50 {
		t.Fatalf("handled %d, paced %v; want 50 and 50", handled.Load(), paced)
	}
	other, err := stage.NewManager(stage.Options{}).CreateStage("T", h, stage.StageConfig{})
	if err != nil || other.Pacer() != nil {
		t.Fatalf("pacer without queue.dispatch (%v)", err)
	}
	for _, tc := range []struct {
		doc, want string
	}{
		{"queue: {dispatch: -1}", "queue.dispatch: dispatch rate must be in [0, 1e9]"},
		{"queue: {burst: 5}", "queue.burst: burst needs a dispatch rate"},
		{"queue: {dispatch: 10, burst: -2}", "queue.burst: negative burst"},
	} {
		_, err := stage.ParseConfig([]byte("stages:\n  S:\n    handler: x\n    "+tc.doc+"\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "line 4") {
			t.Errorf("%s: %v, want %q", tc.doc, err, tc.want)
		}
	}
}
