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
