package stage

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Monitor events. A monitor (Manager.Monitor) receives, on its sink, a
// StageFailed for every failure of the stage, a StageRestarted for every
// restart by its supervisor and, last, one StageTerminated when the stage
// ends (Whirlwind §III.A, after Erlang's monitors).

// StageFailed reports a failure: a batch whose handler returned an error or
// panicked, a handler whose Init failed on a restart, or (Err wrapping
// ErrLinked) events cancelled because an event of their principal failed.
// Events is shared by every monitor: do not modify it.
type StageFailed struct {
	Failure
}

// StageRestarted reports that a supervisor replaced the stage's handler by
// a fresh one from its factory. Instance is the new handler's number (the
// first handler is 1).
type StageRestarted struct {
	Stage      string
	Supervisor string
	Instance   uint64
	Time       time.Time
}

// TerminationReason says why a stage ended.
type TerminationReason string

// Termination reasons.
const (
	ReasonDestroyed TerminationReason = "destroyed" // Manager.DestroyStage
	ReasonShutdown  TerminationReason = "shutdown"  // Manager.Shutdown
	ReasonGaveUp    TerminationReason = "gave up"   // a root supervisor gave up and the manager stopped
)

// StageTerminated is the last event a monitor gets from a stage.
type StageTerminated struct {
	Stage  string
	Reason TerminationReason
	Err    error // why the manager stopped, for ReasonGaveUp
	Time   time.Time
}

// Normal reports whether the stage ended on request rather than because
// supervision failed.
func (t StageTerminated) Normal() bool { return t.Reason != ReasonGaveUp }

// Monitor events must reach their monitors under overload: they are
// non-rejectable (sink.NonRejectable), so a stage's queue admits them
// beyond its capacity and the predicates of package enqueuepred admit them.
var (
	_ sink.NonRejectable = StageFailed{}
	_ sink.NonRejectable = StageRestarted{}
	_ sink.NonRejectable = StageTerminated{}
)

// NonRejectable reports true: see sink.NonRejectable.
func (StageFailed) NonRejectable() bool { return true }

// NonRejectable reports true: see sink.NonRejectable.
func (StageRestarted) NonRejectable() bool { return true }

// NonRejectable reports true: see sink.NonRejectable.
func (StageTerminated) NonRejectable() bool { return true }

// ErrMonitor is wrapped by Monitor's errors about its arguments.
var ErrMonitor = errors.New("stage: monitor")

type monitor struct{ s sink.Sink }

// monitors is a stage's list of monitoring sinks.
type monitors struct {
	mu    sync.Mutex
	list  []*monitor
	ended bool
}

// Monitor has every later failure, restart and the termination of the named
// stage delivered as an event (StageFailed, StageRestarted,
// StageTerminated) to s. Monitor events are non-rejectable
// (sink.NonRejectable): a monitoring stage gets them even when its queue is
// full or its predicate sheds load (predicates of package enqueuepred
// honour sink.NonRejectable; a custom one should too). Delivery never
// blocks the stage: an event that s refuses all the same (closed, or a
// predicate that ignores NonRejectable) is counted (MonitorRejections) and
// logged. cancel stops the monitoring; a terminated stage drops its
// monitors by itself.
//
// The runtime enqueues on a stage's sink as a stage would, so a monitoring
// stage still gets its events while the manager shuts down.
func (m *Manager) Monitor(stage string, s sink.Sink) (cancel func(), err error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil sink for stage %q", ErrMonitor, stage)
	}
	st, ok := m.Stage(stage)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoStage, stage)
	}
	mon := &monitor{s: s}
	ms := &st.monitors
	ms.mu.Lock()
	if ms.ended {
		ms.mu.Unlock()
		return nil, fmt.Errorf("%w: %q (terminated)", ErrNoStage, stage)
	}
	ms.list = append(ms.list, mon)
	ms.mu.Unlock()
	return func() {
		ms.mu.Lock()
		defer ms.mu.Unlock()
		for i, x := range ms.list {
			if x == mon {
				ms.list = append(ms.list[:i:i], ms.list[i+1:]...)
				return
			}
		}
	}, nil
}

// MonitorRejections returns how many monitor events were refused by the
// monitoring sinks.
func (m *Manager) MonitorRejections() uint64 { return m.monitorRejected.Load() }

// notify delivers ev to s's monitors; final (a StageTerminated) also ends
// the monitoring.
func (m *Manager) notify(s *Stage, ev sink.Event, final bool) {
	ms := &s.monitors
	ms.mu.Lock()
	if ms.ended {
		ms.mu.Unlock()
		return
	}
	list := ms.list
	if final {
		ms.ended = true
		ms.list = nil
	}
	ms.mu.Unlock()
	for _, mon := range list {
		var err error
		if k, ok := mon.s.(*stageSink); ok {
			if err = k.st.queue.Enqueue(ev); err == nil { // the runtime is no outsider
				m.edgeCounter(s.name, k.st.name).Add(1)
			}
		} else {
			err = mon.s.Enqueue(ev)
		}
		if err != nil {
			m.monitorRejected.Add(1)
			m.log.Warn("monitor event rejected", "stage", s.name, "event", eventName(ev), "monitor", fmt.Sprint(mon.s), "err", err)
		}
	}
}

func eventName(ev sink.Event) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", ev), "stage.")
}
