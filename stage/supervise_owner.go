package stage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// supState is everything supervision knows. It has one owner at a time
// (see supervise.go): the supervisor goroutine while it runs, else the
// caller of supervision.run that took it from supervision.idle.
type supState struct {
	tree supTree
	// started: Start has handed the state to the supervisor goroutine
	// (groups are set up before).
	started bool
	// holds is the stages restart workers hold, from their dispatch to
	// their report: they are replacing their handlers. A stage that
	// DestroyStage or Shutdown asks to end meanwhile is ended after the
	// restart (supervisor.worked, endTaken).
	holds map[*Stage]*restartHold
	// Stage.ended, on each stage, is part of the state too.
}

// restartJob is one restart worker's job: its stages, and the end of its
// waits (backoff, running batches), for when all of them are ended.
type restartJob struct {
	stages []*Stage
	cancel context.CancelFunc
}

// restartHold is a stage a restart worker holds.
type restartHold struct {
	job *restartJob
	// step is what the restart is doing, for errors. Written by the
	// worker only (it is the worker's progress), read by the owner.
	step atomic.Pointer[string]
	// enders wait for the worker to end the stage: DestroyStage,
	// Shutdown. Non-empty: the stage ends once the restart is done.
	enders []*endWait
}

func (h *restartHold) setStep(step string) { h.step.Store(&step) }

func (h *restartHold) stepName() string {
	if p := h.step.Load(); p != nil {
		return *p
	}
	return "waiting for its turn in the restart"
}

// endWait is a DestroyStage or Shutdown waiting for a restart worker to
// end stage st. Its fields other than st, destroy and done belong to
// supState's owner.
type endWait struct {
	st      *Stage
	destroy bool       // destroy the stage's handler (it is not running)
	done    chan error // gets the end's result, once; buffered: never blocks the owner
	left    bool       // the waiter's context ended: it no longer waits
	sent    bool       // done has the result
}

// supNote is a failure for the supervisor to deal with. Its stage's queue
// is paused (by supervision.pause) until the note is dealt with.
type supNote struct {
	st       *Stage
	instance uint64
	err      error
	// healthy: the failed handler had handled events successfully since
	// it started (a rare poison event, not a crash loop).
	healthy bool
}

// supervision is the manager's side of supervision: what goroutines other
// than the supervisor call (CreateStage, DestroyStage, Supervise, a
// failing batch, Start, Shutdown), turned into messages to supState's
// owner. See supervise.go.
type supervision struct {
	m *Manager
	// ctl carries messages to the supervisor goroutine while it runs.
	// Unbuffered: a message sent is one the supervisor has taken, so none
	// is left behind when it returns.
	ctl chan func(*supervisor)
	// idle holds the state while no supervisor goroutine runs (capacity
	// one): before Start, and after the supervisor returned.
	idle chan *supState
	done chan struct{} // closed when the supervisor goroutine has returned
	// wg counts the supervisor goroutine and its workers. Shutdown
	// waits for them (wait); a worker stuck in a hung Destroy or Init
	// outlives a Shutdown whose context ended, and ends its stages when
	// the call returns.
	wg sync.WaitGroup
}

func (sv *supervision) init(m *Manager) {
	sv.m = m
	sv.ctl = make(chan func(*supervisor))
	sv.done = make(chan struct{})
	sv.idle = make(chan *supState, 1)
	sv.idle <- &supState{
		tree:  supTree{nodes: map[string]*supNode{}, parentOf: map[*Stage]*supNode{}},
		holds: map[*Stage]*restartHold{},
	}
}

// run runs f by the state's owner and waits for it: in the supervisor
// goroutine (l is then the supervisor) while it runs, else here (l nil),
// holding the state meanwhile. f must not block, and code that the
// supervisor goroutine runs never calls run (it would wait for itself).
func (sv *supervision) run(f func(st *supState, l *supervisor)) {
	reply := make(chan struct{})
	select {
	case sv.ctl <- func(l *supervisor) { f(l.st, l); close(reply) }:
		<-reply
	case st := <-sv.idle:
		defer func() { sv.idle <- st }()
		f(st, nil)
	}
}

// addOwn gives s its own supervisor.
func (sv *supervision) addOwn(s *Stage, cfg SupervisorConfig) error {
	var err error
	sv.run(func(st *supState, _ *supervisor) { err = st.tree.addOwn(s, cfg) })
	return err
}

// removeStage takes a destroyed stage out of the tree. Failures of s
// still waiting are then dropped and its queue resumed; a restart that
// holds s goes on, and ends s once done if DestroyStage asks
// (Manager.endStages).
func (sv *supervision) removeStage(s *Stage) {
	sv.run(func(st *supState, _ *supervisor) { st.tree.remove(s) })
}

// pause pauses the queue of a supervised stage whose handler has just
// crashed (err counts as a crash for its supervisor's RestartOn), before
// anyone hears of the failure: an event enqueued by a monitor (or anyone)
// once it knows goes to the restarted handler, not to the failed one. It
// decides from s.restartOn, without asking the supervisor. It reports
// whether it paused; report then hands the pause to the supervisor.
func (sv *supervision) pause(s *Stage, err error) bool {
	on := s.restartOn.Load()
	if on == nil || (*on != RestartOnError && !errors.Is(err, ErrHandlerPanic)) {
		return false // unsupervised, or not a crash: contained like any failure
	}
	s.queue.Pause()
	return true
}

// report hands a failure of s's handler number instance, with s's queue
// paused by pause (paused), to the supervisor, which resumes the queue
// once it has dealt with the failure. healthy: the handler had handled
// events since it started. It waits for nothing but the supervisor
// taking the message (not for it to be dealt with).
func (sv *supervision) report(s *Stage, instance uint64, healthy bool, err error, paused bool) {
	if !paused {
		return
	}
	n := supNote{st: s, instance: instance, err: err, healthy: healthy}
	select {
	case sv.ctl <- func(l *supervisor) { l.failed(n) }:
		// Taken: the supervisor deals with it while the batch ends.
	case st := <-sv.idle:
		sv.idle <- st
		s.queue.Resume() // supervision has ended
	}
}

// start hands the state to the supervisor goroutine, which supervises
// until stop, the end of ctx, or a root that gives up with onGiveUp stop.
func (sv *supervision) start(ctx context.Context) {
	st := <-sv.idle
	st.started = true
	ctx, cancel := context.WithCancel(ctx)
	seed := uint64(time.Now().UnixNano())
	r := sv.m.opts.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(seed, seed>>1|1))
	}
	l := &supervisor{sv: sv, m: sv.m, st: st, ctx: ctx, end: cancel, rand: r, trees: map[*supNode]*treeWork{}}
	sv.wg.Add(1)
	go l.run() // owned by supervision: Shutdown stops it (stop) and waits for it (wait)
}

// stop ends supervision: no more restarts, and workers give up their
// waits (backoff, running batches); the stages they were about to restart
// resume with the handlers they have. A worker already in a handler's
// Destroy or Init goes on: Shutdown ends its stages through it
// (Manager.endStages).
func (sv *supervision) stop() {
	sv.run(func(_ *supState, l *supervisor) {
		if l != nil {
			l.stop()
		}
	})
}

// wait waits for the supervisor goroutine and its workers to return,
// until ctx ends; past it, it still waits unless a restart worker holds
// a stage (hung in a handler's Destroy or Init: it returns when the call
// does, and the supervisor goroutine after it). Called after stop.
func (sv *supervision) wait(ctx context.Context) {
	var started bool
	sv.run(func(st *supState, _ *supervisor) { started = st.started })
	if !started {
		return
	}
	select {
	case <-sv.done:
		sv.wg.Wait()
		return
	case <-ctx.Done():
	}
	var held bool
	sv.run(func(st *supState, _ *supervisor) { held = len(st.holds) > 0 })
	if held {
		return
	}
	// Every worker left is at a wait that ends with supervision, failing
	// a root's stages (which waits for nothing) or reporting.
	<-sv.done
	sv.wg.Wait()
}

// claim asks the owner for the end of stages (DestroyStage, Shutdown):
// each stage not yet ended is marked ended and either returned in mine,
// for the caller to end (it holds the last handler), or, if a restart
// worker holds it, in waits: the worker ends it (destroying its handler
// if destroy) once its restart is done.
func (sv *supervision) claim(stages []*Stage, destroy bool) (mine []*Stage, waits []*endWait) {
	sv.run(func(st *supState, _ *supervisor) {
		for _, s := range stages {
			if s.ended {
				continue
			}
			if h := st.holds[s]; h != nil {
				w := &endWait{st: s, destroy: destroy, done: make(chan error, 1)}
				h.enders = append(h.enders, w)
				waits = append(waits, w)
				if st.allEnding(h.job) {
					// No stage of the job is to be restarted: end its
					// backoff or its wait for running batches now. (Once
					// the handlers are being swapped it is too late, and
					// the swap finishes first.)
					h.job.cancel()
				}
				continue
			}
			s.ended = true
			mine = append(mine, s)
		}
	})
	return mine, waits
}

// allEnding reports whether every stage of job is to be ended.
func (st *supState) allEnding(job *restartJob) bool {
	for _, s := range job.stages {
		if h := st.holds[s]; h == nil || len(h.enders) == 0 {
			return false
		}
	}
	return true
}

// leave is a waiter whose context ended: it stops waiting. It returns
// the step the restart is at, or ok false if the result came meanwhile
// (it is in w.done).
func (sv *supervision) leave(w *endWait) (step string, ok bool) {
	sv.run(func(st *supState, _ *supervisor) {
		if w.sent {
			return
		}
		w.left, ok = true, true
		if h := st.holds[w.st]; h != nil {
			step = h.stepName()
		}
	})
	return step, ok
}

// stagesEnded reports the end of stages by an ender worker (errs by index) to
// their waiters (ends, by index) and forgets the holds. It reports
// whether a waiter had stopped waiting: the worker then logs what it did.
func (l *supervisor) stagesEnded(stages []*Stage, ends [][]*endWait, errs []error) (left bool) {
	for i, s := range stages {
		if ends[i] == nil {
			continue
		}
		delete(l.st.holds, s)
		for _, w := range ends[i] {
			if w.left {
				left = true
				continue
			}
			w.sent = true
			w.done <- errs[i]
		}
	}
	return left
}

// endStages ends stages for good (DestroyStage, Shutdown), in the order
// given: each one's last handler is destroyed once, if destroy, and no
// supervisor makes it a new one. A stage a restart holds is ended by the
// restart's worker when it is done; endStages waits for that until ctx
// ends, and then returns an error wrapping ErrNotStopped and ctx's cause
// that names the restart's step (the worker ends the stage when the hung
// call returns, and logs it). who names the caller in the log.
func (m *Manager) endStages(ctx context.Context, who string, stages []*Stage, destroy bool) error {
	mine, waits := m.sup.claim(stages, destroy)
	var errs []error
	if destroy {
		for _, s := range mine {
			if d, ok := s.Handler().(Destroyer); ok {
				errs = append(errs, m.destroyHandler(s, d))
			}
		}
	}
	var left, steps []string
	for _, w := range waits {
		select {
		case err := <-w.done:
			errs = append(errs, err)
			continue
		case <-ctx.Done():
		}
		step, ok := m.sup.leave(w)
		if !ok {
			errs = append(errs, <-w.done)
			continue
		}
		left = append(left, w.st.name)
		steps = append(steps, step)
		errs = append(errs, fmt.Errorf("stage %q: %w: waiting for its supervisor restart, %s: %w",
			w.st.name, ErrNotStopped, step, context.Cause(ctx)))
	}
	if len(left) > 0 {
		m.log.Error(who+" abandoned a supervisor restart: its worker ends the stages when the hung call returns",
			"stages", left, "waiting", steps, "err", context.Cause(ctx))
	}
	return errors.Join(errs...)
}

// supervisor is the state of the supervisor goroutine (run), as in
// suture's serviceLoop: only that goroutine touches it, and it never
// blocks on anything but its next message. Failures are dealt with per
// supervision tree (a root and everything under it), one at a time and in
// order within a tree, because a strategy or an escalation may restart
// any stage of the tree and counts restarts for the whole of it. What
// takes time (a backoff, waiting for running batches, Destroy and Init,
// failing a root's stages) runs in a worker goroutine that reports back
// with a message, so other trees, and the tree's own new failures
// (queued), never wait for it.
type supervisor struct {
	sv    *supervision
	m     *Manager
	st    *supState
	ctx   context.Context // ends with supervision: workers give up their waits
	end   context.CancelFunc
	rand  *rand.Rand             // jitter of crash-loop backoffs
	ended bool                   // no more restarts: failures resume at once
	trees map[*supNode]*treeWork // by root: the trees with failures to deal with
	busy  int                    // workers running
}

// treeWork is one tree's failures being dealt with.
type treeWork struct {
	root   *supNode
	notes  []supNote // failures waiting, in order
	busy   bool      // a worker is dealing with the current failure
	paused []*Stage  // the queues paused for the current failure
}

// run is the supervisor goroutine. It returns once supervision has ended
// and its workers have reported back, handing the state back to idle.
func (l *supervisor) run() {
	defer l.sv.wg.Done()
	for !l.ended || l.busy > 0 {
		var end <-chan struct{}
		if !l.ended {
			end = l.ctx.Done()
		}
		select {
		case f := <-l.sv.ctl:
			f(l)
		case <-end:
			l.stop()
		}
	}
	l.sv.idle <- l.st
	close(l.sv.done)
}

// stop ends supervision: no more restarts; workers give up their waits.
// The failures still waiting resume their stages as their turn comes.
func (l *supervisor) stop() {
	l.ended = true
	l.end()
}

func (l *supervisor) now() time.Time {
	if l.m.opts.Now != nil {
		return l.m.opts.Now()
	}
	return time.Now()
}

// failed takes a failure reported by a failing batch.
func (l *supervisor) failed(n supNote) {
	p := l.st.tree.parentOf[n.st]
	if l.ended || p == nil {
		n.st.queue.Resume()
		return
	}
	root := p.root()
	tw := l.trees[root]
	if tw == nil {
		tw = &treeWork{root: root}
		l.trees[root] = tw
	}
	tw.notes = append(tw.notes, n)
	l.next(tw)
}

// next deals with tw's waiting failures in order until one needs a
// worker; the tree leaves l.trees once it has none.
func (l *supervisor) next(tw *treeWork) {
	for !tw.busy && len(tw.notes) > 0 {
		n := tw.notes[0]
		tw.notes = tw.notes[1:]
		tw.paused = append(tw.paused, n.st) // the pause report handed over
		l.handle(tw, n)
		if !tw.busy {
			l.settle(tw)
		}
	}
	if !tw.busy {
		delete(l.trees, tw.root)
	}
}

// settle resumes the queues paused for tw's current failure: it has been
// dealt with.
func (l *supervisor) settle(tw *treeWork) {
	for _, s := range tw.paused {
		s.queue.Resume()
	}
	tw.paused = tw.paused[:0]
}

// handle takes up one failure.
func (l *supervisor) handle(tw *treeWork, n supNote) {
	p := l.st.tree.parentOf[n.st]
	if l.ended || p == nil || p.root().failed {
		return // ended, left the tree, or its tree failed for good
	}
	if n.instance != n.st.instanceNumber() {
		return // the handler that failed was already replaced
	}
	l.escalate(tw, p, supChild{st: n.st}, n.err, n.healthy)
}

// escalate applies the supervisors' strategies to a failure of child of
// node: restart (in a worker), or give up and escalate, up to the root.
// healthy: the failed handler had handled events (no crash loop).
func (l *supervisor) escalate(tw *treeWork, node *supNode, child supChild, cause error, healthy bool) {
	for node != nil {
		if !l.allow(node) {
			l.m.log.Error("supervisor gave up", "supervisor", node.name, "restarts", node.cfg.MaxRestarts,
				"period", node.cfg.Period, "err", cause)
			if node.parent == nil && node.cfg.OnGiveUp == GiveUpStop {
				l.stop()
				l.m.gaveUp(node.name, cause)
				return
			}
			if node.parent == nil {
				node.failed = true
				stages := supChild{node: node}.stages(nil)
				for _, s := range stages {
					s.restartOn.Store(nil) // their failures are failures only now
				}
				name := node.name
				l.work(tw, node, func() workResult {
					l.m.failStages(name, cause, stages)
					return workResult{}
				})
				return
			}
			child, node = supChild{node: node}, node.parent
			continue
		}
		targets := affected(node, child)
		if targets == nil {
			return // the child left the tree meanwhile
		}
		var stages []*Stage
		for _, c := range targets {
			c.reset()
			stages = c.stages(stages)
		}
		stages = slices.DeleteFunc(stages, func(s *Stage) bool { return s.ended })
		// The worker holds the stages from now on (see supState.holds).
		ctx, cancel := context.WithCancel(l.ctx)
		job := &restartJob{stages: stages, cancel: cancel}
		holds := make([]*restartHold, len(stages))
		for i, s := range stages {
			if !slices.Contains(tw.paused, s) { // the failed stage paused itself
				s.queue.Pause()
				tw.paused = append(tw.paused, s)
			}
			holds[i] = &restartHold{job: job}
			holds[i].setStep("waiting for its backoff")
			l.st.holds[s] = holds[i]
		}
		// The worker undoes the failure's pauses itself once the restart
		// has succeeded (or is called off), so that the stages run again
		// without waiting for the supervisor to take its report; settle
		// then has nothing left to resume.
		delay, name, paused := node.restartDelay(healthy, l.rand.Float64()), node.name, slices.Clone(tw.paused)
		l.work(tw, node, func() workResult {
			res := workResult{job: job, taken: stages, initialized: make([]bool, len(stages))}
			if !l.m.sleep(ctx, delay) {
				// Stopping, or the stages are being ended: they keep the
				// handlers they have.
				for i := range res.initialized {
					res.initialized[i] = true
				}
			} else {
				res.failed, res.err = l.m.restart(ctx, name, stages, holds, res.initialized)
			}
			if res.failed == nil {
				for _, s := range paused {
					s.queue.Resume()
				}
				res.resumed = true
			}
			return res
		})
		return
	}
}

// workResult is a worker's report. taken are the stages a restart held,
// with whether each one's handler is initialized (the new one, or the old
// one if the restart did not happen); failed is the first stage whose
// fresh handler failed Init, with its error err.
type workResult struct {
	job         *restartJob
	resumed     bool // the worker resumed the queues paused for the failure
	taken       []*Stage
	initialized []bool
	failed      *Stage
	err         error
}

// work runs job, which deals with tw's current failure for node, in a
// worker goroutine that reports back to worked. The supervisor goroutine
// owns the worker: it runs until every worker has reported.
func (l *supervisor) work(tw *treeWork, node *supNode, job func() workResult) {
	tw.busy = true
	l.busy++
	ctl := l.sv.ctl
	l.sv.wg.Add(1)
	go func() { // owned by the supervisor goroutine, which runs until it reports
		defer l.sv.wg.Done()
		res := job()
		ctl <- func(l *supervisor) { l.worked(tw, node, res) }
	}()
}

// worked takes a worker's report. The stages it held are free again,
// but those DestroyStage or Shutdown asked to end meanwhile, which an
// ender worker ends (endTaken). A stage whose fresh handler failed Init
// is another failure of node's child that holds it, and a crash loop
// (the handler handled nothing).
func (l *supervisor) worked(tw *treeWork, node *supNode, res workResult) {
	l.busy--
	tw.busy = false
	if res.job != nil {
		res.job.cancel()
	}
	if res.resumed {
		tw.paused = tw.paused[:0]
	}
	var ends [][]*endWait
	for i, s := range res.taken {
		h := l.st.holds[s]
		if h == nil || len(h.enders) == 0 {
			delete(l.st.holds, s)
			continue
		}
		if ends == nil {
			ends = make([][]*endWait, len(res.taken))
		}
		ends[i] = h.enders
		s.ended = true
		h.setStep("ending the stage: in its handler's Destroy")
	}
	if ends != nil {
		l.endTaken(res.taken, res.initialized, ends)
	}
	if res.failed != nil && !l.ended && !res.failed.ended {
		for _, c := range node.children {
			if c.contains(res.failed) {
				l.escalate(tw, node, c, res.err, false)
				break
			}
		}
	}
	if !tw.busy {
		l.settle(tw)
		l.next(tw)
	}
}

// endTaken ends, in an ender worker, the stages a restart held that
// DestroyStage or Shutdown asked to end meanwhile (ends, by index): their
// handlers that are initialized are destroyed, and the waiters get the
// result (stagesEnded). If a waiter had stopped waiting (its context ended
// while the restart hung), the worker logs what it did.
func (l *supervisor) endTaken(stages []*Stage, initialized []bool, ends [][]*endWait) {
	l.busy++
	l.sv.wg.Add(1)
	m, ctl := l.m, l.sv.ctl
	go func() { // owned by the supervisor goroutine, which runs until it reports
		defer l.sv.wg.Done()
		errs := make([]error, len(stages))
		var names []string
		for i, s := range stages {
			if ends[i] == nil {
				continue
			}
			names = append(names, s.name)
			destroy := false
			for _, w := range ends[i] {
				destroy = destroy || w.destroy
			}
			if d, ok := s.Handler().(Destroyer); ok && destroy && initialized[i] {
				errs[i] = m.destroyHandler(s, d)
			}
		}
		ctl <- func(l *supervisor) {
			l.busy--
			if l.stagesEnded(stages, ends, errs) {
				m.log.Warn("abandoned restart finished: the stages are ended and their handlers destroyed",
					"stages", names, "err", errors.Join(errs...))
			}
		}
	}()
}

// allow records a restart by node now and reports whether its intensity
// permits it.
func (l *supervisor) allow(node *supNode) bool {
	now := l.now()
	cut := now.Add(-node.cfg.Period)
	// The history is in time order: drop its head up to the cut (no copy
	// of the rest; append reallocates the array as it fills).
	i := 0
	for i < len(node.history) && !node.history[i].After(cut) {
		i++
	}
	node.history = append(node.history[i:], now)
	return len(node.history) <= node.cfg.MaxRestarts
}
