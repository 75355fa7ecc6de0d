package accesslog

import (
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// The AccessLog stage: its events are batches of records
// ([]http.AccessRecord, handed over by Record when half of Buffer) and
// ticks (a timer armed by the first record of a batch, so that a batch
// that does not fill up is written within drainEvery). Record bounds
// what waits: one batch in the stage's hands, one being filled; the
// stage's queue itself is unbounded and holds at most that batch and a
// tick.

// drainEvery is how long the first record of a batch waits for the batch
// to fill before the stage takes it anyway.
const drainEvery = 10 * time.Millisecond

// tick has the stage take the records waiting.
type tick struct{}

// Attach creates the stage that writes the log, StageName, on m (before
// or after m starts; the manager's Shutdown drains it like any stage):
// one goroutine, its records bounded by Buffer. Records made before
// Attach are dropped and counted.
func (l *Log) Attach(m *stage.Manager) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queue != nil {
		return fmt.Errorf("accesslog: attached twice")
	}
	st, err := m.CreateStage(StageName, &writer{l: l, lastFlush: time.Now()},
		stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 1}})
	if err != nil {
		return fmt.Errorf("accesslog: %w", err)
	}
	l.m, l.queue = m, st.Sink()
	// A manager's Shutdown cancels the timers: the stage takes the
	// records waiting when the shutdown starts.
	m.Subscribe(stage.SignalShutdownStarted, l.queue)
	return nil
}

// handOverLocked gives the batch being filled to the stage. The caller
// holds mu.
func (l *Log) handOverLocked() {
	batch := l.pending
	l.pending = make([]http.AccessRecord, 0, l.half())
	l.batches++
	if err := l.queue.Enqueue(batch); err != nil { // closed: the manager shut down
		l.batches--
		l.dropped.Add(uint64(len(batch)))
	}
}

// armLocked has a tick reach the stage in drainEvery. The caller holds
// mu.
func (l *Log) armLocked() {
	t, err := l.m.After(drainEvery, l.queue, tick{})
	if err != nil {
		return // the manager is shutting down: its drain takes the rest
	}
	l.armed, l.timer = true, t
}

// take returns the records the stage should write on ev: the batch it
// carries, or on a tick (or stage.ShutdownStarted) the batch being
// filled. It hands over a full
// batch that waited for the stage, and re-arms the tick if records are
// waiting.
func (l *Log) take(ev sink.Event) []http.AccessRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var batch []http.AccessRecord
	switch ev := ev.(type) {
	case []http.AccessRecord:
		l.batches--
		batch = ev
	default: // a tick, or the manager's shutdown: take the batch being filled
		if _, ok := ev.(tick); ok {
			l.armed = false
		}
		batch, l.pending = l.pending, make([]http.AccessRecord, 0, l.half())
	}
	switch {
	case l.closed:
	case len(l.pending) == l.half() && l.batches == 0:
		l.handOverLocked()
	case len(l.pending) > 0 && !l.armed:
		l.armLocked()
	}
	return batch
}

// idle reports whether no record waits for the stage.
func (l *Log) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending) == 0 && l.batches == 0
}

// writer is the AccessLog stage's handler: it owns l.w while the stage
// runs.
type writer struct {
	l         *Log
	line      []byte
	lastFlush time.Time
}

func (*writer) SingleThreaded() {}

// HandleEvents writes the records of its batches and ticks, then flushes
// if no record is waiting or the last flush is FlushInterval old.
func (w *writer) HandleEvents(events []sink.Event) error {
	for _, ev := range events {
		batch := w.l.take(ev)
		for i := range batch {
			w.line = w.l.write(w.line, &batch[i])
		}
	}
	if now := time.Now(); w.l.idle() || now.Sub(w.lastFlush) >= w.l.cfg.FlushInterval {
		w.l.flush()
		w.lastFlush = now
	}
	return nil
}

// Destroy flushes the last lines.
func (w *writer) Destroy() error {
	w.l.flush()
	return nil
}
