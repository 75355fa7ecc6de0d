package stage

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Restarts: the backoff decision (restartDelay, made by the supervisor
// goroutine when it dispatches a restart) and what the restart workers of
// supervise_owner.go do. What takes time runs in a worker goroutine owned
// by the supervisor goroutine (see supervise.go), never in the owner.

// restartDelay decides how long node waits before the restart allow has
// just recorded (the last of node.history), with u, uniform in [0, 1),
// for the jitter. Only a crash loop waits: the failed handler handled
// nothing since it started (healthy false) and node restarted before
// within its Period. The k-th restart of a loop waits Backoff·2^(k-1), at
// most MaxBackoff, jittered to [d/2, d). Any other restart (a healthy
// handler hit by a rare poison event, the first restart in a period)
// waits nothing and ends the loop; so does a negative Backoff (off).
func (n *supNode) restartDelay(healthy bool, u float64) time.Duration {
	if healthy || len(n.history) < 2 || n.cfg.Backoff < 0 {
		n.loop = 0
		return 0
	}
	n.loop++
	d, limit := n.cfg.Backoff, max(n.cfg.MaxBackoff, n.cfg.Backoff)
	for i := 1; i < n.loop && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + time.Duration(u*float64(d-d/2))
}

// sleep waits d on the manager's clock (Options.After); it reports false
// if ctx (supervision) ends first.
func (m *Manager) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	var c <-chan time.Time
	if m.opts.After != nil {
		c = m.opts.After(d)
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		c = t.C
	}
	select {
	case <-c:
		return true
	case <-ctx.Done():
		return false
	}
}

// failStages ends the stages of a root supervisor that gave up (OnGiveUp
// fail): their monitors hear of it, their queues close, so that enqueues
// fail with sink.ErrClosed, and what they held is discarded (counted as
// Removed, logged). The manager and its other stages go on.
func (m *Manager) failStages(root string, cause error, stages []*Stage) {
	err := fmt.Errorf("%w: root supervisor %q: %w", ErrGaveUp, root, cause)
	names := make([]string, len(stages))
	lost := 0
	for i, s := range stages {
		names[i] = s.name
		m.notify(s, StageTerminated{Stage: s.name, Reason: ReasonGaveUp, Err: err, Time: time.Now()}, true)
		lost += m.abandonStage(s)
	}
	m.log.Error("root supervisor gave up: its stages are failed and reject events", "supervisor", root,
		"stages", names, "discarded", lost, "err", cause)
}

// restart replaces the handlers of stages (paused and held for this
// worker by the owner, holds by index): it waits for their running
// batches, destroys the old handlers in reverse order, then makes and
// initializes new ones in order, recording which initialized. A stage
// that DestroyStage or Shutdown asked to end meanwhile is ended once the
// restart is done (supervisor.worked). It returns the first stage whose
// new handler failed Init.
func (m *Manager) restart(ctx context.Context, supervisor string, stages []*Stage, holds []*restartHold, initialized []bool) (*Stage, error) {
	for i, s := range stages {
		holds[i].setStep("waiting for its running batches")
		if err := s.waitIdle(ctx, supervisor); err != nil {
			m.log.Warn("restart abandoned", "supervisor", supervisor, "stage", s.name, "err", err)
			for i := range initialized {
				initialized[i] = true // the stages keep the handlers they have
			}
			return nil, nil
		}
	}
	for i := len(stages) - 1; i >= 0; i-- {
		s := stages[i]
		if d, ok := s.Handler().(Destroyer); ok {
			holds[i].setStep("in the old handler's Destroy")
			if err := m.destroyHandler(s, d); err != nil {
				m.log.Warn("destroy before restart failed", "stage", s.name, "err", err)
			}
		}
		holds[i].setStep("waiting for the restart of the stages before it")
	}
	var failed *Stage
	var failErr error
	for i, s := range stages {
		holds[i].setStep("in its factory or the new handler's Init")
		h := s.cfg.Factory()
		var err error
		if h == nil {
			err = fmt.Errorf("%w: stage %q: factory returned a nil handler", ErrInit, s.name)
			h = HandlerFunc(func([]sink.Event) error { return err })
		}
		inst := newInstance(h, s.cur.Load().n+1)
		s.cur.Store(inst)
		s.restarts.Add(1)
		if err == nil {
			holds[i].setStep("in the new handler's Init")
			err = m.initStage(s)
		}
		holds[i].setStep("restarted, waiting for the restart of the stages after it")
		if err != nil {
			m.log.Error("restarted handler failed to initialize", "stage", s.name, "supervisor", supervisor, "err", err)
			s.failures.Add(1)
			m.notify(s, StageFailed{Failure{Stage: s.name, Err: err, Time: time.Now(), Instance: inst.n}}, false)
			if failed == nil {
				failed, failErr = s, err
			}
			continue
		}
		initialized[i] = true
		m.log.Info("stage restarted", "stage", s.name, "supervisor", supervisor, "instance", inst.n)
		m.notify(s, StageRestarted{Stage: s.name, Supervisor: supervisor, Instance: inst.n, Time: time.Now()}, false)
	}
	return failed, failErr
}

// idleSpins is how many times waitIdle yields before it sleeps.
const idleSpins = 64

// restartWaitWarn is how long a restart waits for a running batch before
// it logs that it is still waiting.
const restartWaitWarn = 5 * time.Second

// waitIdle waits until no batch of s is running. The caller has paused its
// queue, so no new batch starts. A handler that never returns holds up the
// restart, and with it its supervision tree (not others), until the
// manager stops; a warning names the stage after restartWaitWarn.
func (s *Stage) waitIdle(ctx context.Context, supervisor string) error {
	// The batch that failed is usually all that runs, and it ends as
	// soon as its report is taken: yield to it a few times before
	// sleeping (a timer's wake-up costs tens of microseconds, which a
	// stage hit by rare poison events pays on every restart).
	for i := 0; i < idleSpins && s.queue.InService() != 0; i++ {
		runtime.Gosched()
	}
	wait := 20 * time.Microsecond
	var waited time.Duration
	warned := false
	for s.queue.InService() != 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		waited += wait
		if waited >= restartWaitWarn && !warned {
			warned = true
			s.mgr.log.Warn("restart waiting for a running batch: a handler may be hung", "stage", s.name,
				"supervisor", supervisor, "events", s.queue.InService(), "waited", waited)
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
	return nil
}

// gaveUp stops the manager after its root supervisor gave up. It runs in
// the supervisor goroutine, so it cannot wait for the shutdown (which
// waits for that goroutine): it moves the manager to stopping, so that no
// other Shutdown takes over, and hands the shutdown, bounded by
// ShutdownBound, to a goroutine whose last act is closing Done. Done's
// observers (Run, a command's main) thus wait for that goroutine, and Err
// carries its result.
func (m *Manager) gaveUp(root string, cause error) {
	err := fmt.Errorf("%w: root supervisor %q: %w", ErrGaveUp, root, cause)
	m.stop.setCause(err)
	m.log.Error("root supervisor gave up: stopping the manager", "supervisor", root, "err", cause)
	m.mu.Lock()
	running := m.state == stateRunning
	if running {
		m.state = stateStopping
	}
	m.mu.Unlock()
	if !running {
		return // a shutdown is under way and will close Done
	}
	bound := m.ShutdownBound()
	go func() { // owned by Done's observers: closing Done is its last act
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		err := m.shutdown(ctx)
		if err != nil {
			m.log.Error("shutdown after supervisor gave up", "err", err)
		}
		m.finish(err)
	}()
}
