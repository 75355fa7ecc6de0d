package stage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Strategy is how a supervisor restarts its children when one fails
// (Erlang/OTP's restart strategies, as in Whirlwind's supervisor library).
type Strategy string

// Restart strategies.
const (
	// OneForOne restarts only the child that failed.
	OneForOne Strategy = "one-for-one"
	// OneForAll restarts every child of the supervisor: for stages that
	// share a fate (the stages of one connection, a cache and its loader).
	OneForAll Strategy = "one-for-all"
	// RestForOne restarts the child that failed and the children listed
	// after it, which depend on it.
	RestForOne Strategy = "rest-for-one"
)

var strategies = []string{string(OneForOne), string(OneForAll), string(RestForOne)}

// RestartOn is which failures of a handler its supervisor treats as
// crashes and restarts it for.
type RestartOn string

// What a supervisor restarts for.
const (
	// RestartOnPanic (default) restarts a handler that panicked (or whose
	// Init failed on a restart). Errors it returns, FailEvent among
	// them, are failures of their events only: counted, logged and
	// reported to monitors, as in an unsupervised stage. A service that
	// fails requests for its upstream's errors keeps running.
	RestartOnPanic RestartOn = "panic"
	// RestartOnError restarts for returned errors as well as panics: for
	// handlers whose error means their state is broken.
	RestartOnError RestartOn = "error"
)

var restartOns = []string{string(RestartOnPanic), string(RestartOnError)}

// GiveUp is what a root supervisor does when it gives up.
type GiveUp string

// What a root supervisor does when it gives up.
const (
	// GiveUpFail (default) fails the root's stages and only them: their
	// queues close and their queued events are discarded (counted as
	// Removed, logged), so that enqueues fail with sink.ErrClosed (an
	// HTTP edge answers 503); their monitors get StageTerminated with
	// ReasonGaveUp. The manager and its other stages go on.
	GiveUpFail GiveUp = "fail"
	// GiveUpStop shuts the whole manager down: Manager.Done is closed and
	// Manager.Err wraps ErrGaveUp.
	GiveUpStop GiveUp = "stop"
)

var giveUps = []string{string(GiveUpFail), string(GiveUpStop)}

// Supervision defaults.
const (
	DefaultMaxRestarts = 3
	DefaultPeriod      = 5 * time.Second
	DefaultBackoff     = 10 * time.Millisecond
	DefaultMaxBackoff  = time.Second
)

// SupervisorConfig configures a supervisor: a stage's own (the stage's
// `supervisor:` block, StageConfig.Supervisor) or a group of stages and
// other supervisors (the top-level `supervisors:` block, Manager.Supervise).
//
// A supervisor restarts failed children by replacing their handlers with
// fresh ones from their factories: the old handler's Destroy runs (if it
// has one), the new one's Init runs. The stage's queue stays: events queued
// while it restarts are kept and handled by the new handler. If more than
// MaxRestarts restarts happen within Period, the supervisor gives up and
// its parent treats that as a failure of the supervisor as a whole
// (restarting every stage under it, per the parent's strategy). A
// supervisor without a parent is a root: when it gives up, it fails its
// stages (OnGiveUp fail, the default: see GiveUpFail) or shuts the manager
// down (OnGiveUp stop: Manager.Done is closed, Manager.Err wraps
// ErrGaveUp).
//
// Only panics are crashes by default (RestartOn panic); returned errors and
// FailEvent restart the handler only with RestartOn error. Restarts back
// off: the n-th restart by a supervisor within its Period waits
// Backoff·2^(n-1), at most MaxBackoff, on Options.After's clock; its
// stages' queues keep their events meanwhile.
//
// A restart first waits for the batches of the stages it restarts that are
// still running. Failures within one supervision tree (a root and
// everything under it) are dealt with one at a time, so a handler that
// never returns holds up restarts in its own tree; other trees go on.
type SupervisorConfig struct {
	// Strategy is one-for-one (default), one-for-all or rest-for-one.
	Strategy Strategy `yaml:"strategy"`
	// MaxRestarts is how many restarts Period allows (0 → 3).
	MaxRestarts int `yaml:"maxRestarts"`
	// Period is the window of the restart intensity (0 → 5s).
	Period time.Duration `yaml:"period"`
	// RestartOn is panic (default: only panics restart) or error
	// (returned errors, FailEvent among them, restart too). It applies
	// to the supervisor's stage children.
	RestartOn RestartOn `yaml:"restartOn"`
	// Backoff is the wait before the first restart within Period; each
	// further one doubles it (0 → 10ms).
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff bounds the wait (0 → 1s).
	MaxBackoff time.Duration `yaml:"maxBackoff"`
	// OnGiveUp is fail (default) or stop: what a root supervisor does
	// when it gives up (see GiveUpFail, GiveUpStop). A supervisor with a
	// parent escalates to it instead.
	OnGiveUp GiveUp `yaml:"onGiveUp"`
	// Children names the stages and supervisors of a group, in start
	// order (rest-for-one restarts the ones after the failed child). A
	// stage with its own supervisor joins through it. Only for groups.
	Children []string `yaml:"children"`
}

func (c SupervisorConfig) withDefaults() SupervisorConfig {
	if c.Strategy == "" {
		c.Strategy = OneForOne
	}
	if c.MaxRestarts == 0 {
		c.MaxRestarts = DefaultMaxRestarts
	}
	if c.Period == 0 {
		c.Period = DefaultPeriod
	}
	if c.RestartOn == "" {
		c.RestartOn = RestartOnPanic
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.Backoff)
	}
	if c.OnGiveUp == "" {
		c.OnGiveUp = GiveUpFail
	}
	return c
}

// checkSupervisor validates a supervisor block; keys are relative to it.
func checkSupervisor(c SupervisorConfig, group bool) *problem {
	if c.Strategy != "" && !slices.Contains(strategies, string(c.Strategy)) {
		return &problem{[]string{"strategy"}, fmt.Sprintf("unknown strategy %q (known: %s)", c.Strategy, strings.Join(strategies, ", "))}
	}
	if c.MaxRestarts < 0 {
		return &problem{[]string{"maxRestarts"}, fmt.Sprintf("negative restart count %d", c.MaxRestarts)}
	}
	if c.Period < 0 {
		return &problem{[]string{"period"}, fmt.Sprintf("negative duration %v", c.Period)}
	}
	if c.RestartOn != "" && !slices.Contains(restartOns, string(c.RestartOn)) {
		return &problem{[]string{"restartOn"}, fmt.Sprintf("unknown value %q (known: %s)", c.RestartOn, strings.Join(restartOns, ", "))}
	}
	if c.Backoff < 0 {
		return &problem{[]string{"backoff"}, fmt.Sprintf("negative duration %v", c.Backoff)}
	}
	if c.MaxBackoff < 0 {
		return &problem{[]string{"maxBackoff"}, fmt.Sprintf("negative duration %v", c.MaxBackoff)}
	}
	if c.MaxBackoff > 0 && c.Backoff > c.MaxBackoff {
		return &problem{[]string{"backoff"}, fmt.Sprintf("backoff %v above maxBackoff %v", c.Backoff, c.MaxBackoff)}
	}
	if c.OnGiveUp != "" && !slices.Contains(giveUps, string(c.OnGiveUp)) {
		return &problem{[]string{"onGiveUp"}, fmt.Sprintf("unknown value %q (known: %s)", c.OnGiveUp, strings.Join(giveUps, ", "))}
	}
	if group && len(c.Children) == 0 {
		return &problem{[]string{"children"}, "a supervisor group needs children (stage or supervisor names)"}
	}
	if !group && len(c.Children) > 0 {
		return &problem{[]string{"children"}, "a stage's own supervisor has no children; group stages under the top-level supervisors: block"}
	}
	return nil
}

// Errors of supervision.
var (
	// ErrGaveUp is wrapped by the StageTerminated.Err of the stages of a
	// root supervisor that gave up, and by Manager.Err if it stopped the
	// manager (onGiveUp stop).
	ErrGaveUp = errors.New("stage: supervisor gave up")
	// ErrSupervisor is wrapped by errors setting up supervision.
	ErrSupervisor = errors.New("stage: supervision")
)

// supNode is a supervisor: a stage's own or a group.
type supNode struct {
	name     string
	cfg      SupervisorConfig // defaults applied
	own      *Stage           // set for a stage's own supervisor
	parent   *supNode
	children []supChild
	history  []time.Time // restarts within the period
	failed   bool        // a root that gave up and failed its stages
}

func newSupNode(name string, cfg SupervisorConfig) *supNode {
	return &supNode{name: name, cfg: cfg.withDefaults()}
}

// root returns the root of n's tree.
func (n *supNode) root() *supNode {
	for n.parent != nil {
		n = n.parent
	}
	return n
}

// supChild is a stage or a supervisor.
type supChild struct {
	st   *Stage
	node *supNode
}

func (c supChild) is(o supChild) bool { return c.st == o.st && c.node == o.node }

// stages appends the stages under c, depth first, in start order.
func (c supChild) stages(out []*Stage) []*Stage {
	if c.st != nil {
		return append(out, c.st)
	}
	for _, cc := range c.node.children {
		out = cc.stages(out)
	}
	return out
}

func (c supChild) contains(s *Stage) bool {
	if c.st != nil {
		return c.st == s
	}
	for _, cc := range c.node.children {
		if cc.contains(s) {
			return true
		}
	}
	return false
}

// reset forgets the restart history of every supervisor under c: a
// restarted supervisor starts afresh.
func (c supChild) reset() {
	if c.node == nil {
		return
	}
	c.node.history = c.node.history[:0]
	for _, cc := range c.node.children {
		cc.reset()
	}
}

// supNote is a failure for supervision to deal with. Its stage's queue is
// paused until the note is dealt with.
type supNote struct {
	st       *Stage
	instance uint64
	err      error
}

// supervision is the manager's supervisor tree. Each supervision tree (a
// root supervisor and everything under it) gets a supervisor goroutine at
// its first failure (treeLoop), which deals with the tree's failures one
// at a time, as one supervisor process would in Erlang/OTP or suture,
// because a strategy or an escalation may restart any stage of the tree
// and counts restarts for the whole of it. Different trees never wait for
// each other: a restart that waits for a hung batch holds up its own tree
// only. A failing batch never waits for supervision: it queues a message.
// The manager waits for the goroutines when it stops. The tree's shape
// (set up before Start, apart from stages' own supervisors) is under mu.
type supervision struct {
	m     *Manager
	mu    sync.Mutex
	nodes map[string]*supNode
	ended bool          // shutting down or gave up: no more restarts
	quit  chan struct{} // closed when ended is set

	parentOf map[*Stage]*supNode    // each supervised stage's supervisor
	loops    map[*supNode]*treeLoop // the supervisor goroutines, by root, made at a tree's first failure

	ctx    context.Context // nil before start
	cancel context.CancelFunc
	wg     sync.WaitGroup // the supervisor goroutines
}

func (sv *supervision) init(m *Manager) {
	sv.m = m
	sv.nodes = map[string]*supNode{}
	sv.loops = map[*supNode]*treeLoop{}
	sv.parentOf = map[*Stage]*supNode{}
	sv.quit = make(chan struct{})
}

// endLocked stops supervision: no more restarts, and failures waiting for
// their tree give up. sv.mu is held.
func (sv *supervision) endLocked() {
	if !sv.ended {
		sv.ended = true
		close(sv.quit)
	}
}

func (sv *supervision) now() time.Time {
	if sv.m.opts.Now != nil {
		return sv.m.opts.Now()
	}
	return time.Now()
}

// addOwn gives s its own supervisor.
func (sv *supervision) addOwn(s *Stage, cfg SupervisorConfig) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if _, dup := sv.nodes[s.name]; dup {
		return fmt.Errorf("%w: stage %q: a supervisor of that name exists", ErrSupervisor, s.name)
	}
	n := newSupNode(s.name, cfg)
	n.own, n.children = s, []supChild{{st: s}}
	sv.nodes[s.name] = n
	sv.parentOf[s] = n
	return nil
}

// Supervise creates a supervisor group over existing stages and
// supervisors (cfg.Children, in start order); see SupervisorConfig. A stage
// child needs a factory (StageConfig.Factory) unless it has its own
// supervisor, which then becomes the child. Every child has at most one
// parent; a group without a parent is a root. Groups are set up before
// Start; stages with their own supervisor may be created at any time.
func (m *Manager) Supervise(name string, cfg SupervisorConfig) error {
	if p := checkSupervisor(cfg, true); p != nil {
		return fmt.Errorf("%w: supervisor %q: %w", ErrSupervisor, name, p.inGo())
	}
	if name == "" {
		return fmt.Errorf("%w: empty supervisor name", ErrSupervisor)
	}
	m.mu.RLock()
	started := m.state != stateNew
	m.mu.RUnlock()
	if started {
		// Failures are dealt with per supervision tree: trees do not
		// merge under a running supervision.
		return fmt.Errorf("%w: supervisor %q: groups are set up before Start", ErrSupervisor, name)
	}
	if _, ok := m.Stage(name); ok {
		return fmt.Errorf("%w: supervisor %q: a stage has that name", ErrSupervisor, name)
	}
	sv := &m.sup
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if _, dup := sv.nodes[name]; dup {
		return fmt.Errorf("%w: supervisor %q defined twice", ErrSupervisor, name)
	}
	node := newSupNode(name, cfg)
	seen := map[string]bool{}
	for _, cn := range cfg.Children {
		if seen[cn] {
			return fmt.Errorf("%w: supervisor %q: child %q listed twice", ErrSupervisor, name, cn)
		}
		seen[cn] = true
		var c supChild
		if st, ok := m.Stage(cn); ok {
			switch {
			case sv.parentOf[st] != nil && sv.parentOf[st].own == st:
				c.node = sv.parentOf[st]
			case sv.parentOf[st] != nil:
				return fmt.Errorf("%w: supervisor %q: stage %q is already supervised by %q", ErrSupervisor, name, cn, sv.parentOf[st].name)
			case st.cfg.Factory == nil:
				return fmt.Errorf("%w: supervisor %q: stage %q: %w", ErrSupervisor, name, cn, errNoFactory)
			default:
				c.st = st
			}
		} else if n := sv.nodes[cn]; n != nil && n.own == nil {
			c.node = n
		} else {
			return fmt.Errorf("%w: supervisor %q: no stage or supervisor %q", ErrSupervisor, name, cn)
		}
		if c.node != nil && c.node.parent != nil {
			return fmt.Errorf("%w: supervisor %q: %q is already supervised by %q", ErrSupervisor, name, cn, c.node.parent.name)
		}
		node.children = append(node.children, c)
	}
	for _, c := range node.children {
		if c.st != nil {
			sv.parentOf[c.st] = node
		} else {
			c.node.parent = node
		}
	}
	sv.nodes[name] = node
	return nil
}

// CreateSupervised creates a stage whose handler f makes, supervised: by
// cfg.Supervisor if set, else by a one-for-one supervisor with the default
// intensity.
func (m *Manager) CreateSupervised(name string, f Factory, cfg StageConfig) (*Stage, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: stage %q: nil factory", ErrInvalidConfig, name)
	}
	cfg.Factory = f
	if cfg.Supervisor == nil {
		cfg.Supervisor = &SupervisorConfig{}
	}
	return m.CreateStage(name, f(), cfg)
}

// removeStage takes a destroyed stage out of the tree.
func (sv *supervision) removeStage(s *Stage) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	p := sv.parentOf[s]
	delete(sv.parentOf, s)
	if p == nil {
		return
	}
	p.children = slices.DeleteFunc(p.children, func(c supChild) bool { return c.st == s })
	if p.own == s {
		delete(sv.nodes, p.name)
		if l := sv.loops[p]; l != nil { // a root leaves: its goroutine ends
			delete(sv.loops, p)
			l.gone = true
			l.signal()
		}
		if gp := p.parent; gp != nil {
			gp.children = slices.DeleteFunc(gp.children, func(c supChild) bool { return c.node == p })
		}
	}
}

// pause pauses the queue of a supervised stage whose handler has just
// crashed (err counts as a crash for its supervisor's RestartOn), before
// anyone hears of the failure: an event enqueued by a
// monitor (or anyone) once it knows goes to the restarted handler, not to
// the failed one. It reports whether it paused; report then takes the
// pause over.
func (sv *supervision) pause(s *Stage, err error) bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.ended || sv.ctx == nil || sv.ctx.Err() != nil || sv.parentOf[s] == nil {
		return false
	}
	if !errors.Is(err, ErrHandlerPanic) && sv.parentOf[s].cfg.RestartOn != RestartOnError {
		return false // not a crash: contained like any failure
	}
	if sv.parentOf[s].root().failed {
		return false
	}
	s.queue.Pause()
	return true
}

// report hands a failure of s's handler number instance to supervision,
// with s's queue paused by pause (paused), so that the failed handler
// gets no new batch; the queue resumes when the failure has been dealt
// with.
func (sv *supervision) report(s *Stage, instance uint64, err error, paused bool) {
	if !paused {
		return
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.ended || sv.ctx == nil || sv.ctx.Err() != nil || sv.parentOf[s] == nil {
		s.queue.Resume() // supervision ended meanwhile
		return
	}
	root := sv.parentOf[s].root()
	l := sv.loops[root]
	if l == nil {
		l = &treeLoop{wake: make(chan struct{}, 1)}
		sv.loops[root] = l
		sv.wg.Add(1)
		go sv.run(sv.ctx, root, l)
	}
	l.notes = append(l.notes, supNote{st: s, instance: instance, err: err})
	l.signal()
}

// start enables supervision until stop or the end of ctx.
func (sv *supervision) start(ctx context.Context) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.ctx, sv.cancel = context.WithCancel(ctx)
	context.AfterFunc(sv.ctx, func() { // the manager's context ended: no more restarts
		sv.mu.Lock()
		sv.endLocked()
		sv.mu.Unlock()
	})
}

// stop ends supervision (no more restarts) and waits for the failures
// being dealt with: a restart in progress is abandoned at its next wait and
// its stages resume with the handlers they have.
func (sv *supervision) stop() {
	sv.mu.Lock()
	sv.endLocked()
	cancel := sv.cancel
	sv.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	sv.wg.Wait()
}

// treeLoop is the supervisor goroutine of one supervision tree (a root
// and everything under it), as in suture: failures of the tree's stages
// come to it as messages, in order, and it deals with them one at a time,
// so a strategy or an escalation that restarts any stage of the tree and
// counts restarts for the whole of it never races another. A restart that
// waits for a hung batch holds up its own tree only.
type treeLoop struct {
	notes []supNote     // failures to deal with, in order; guarded by sv.mu
	gone  bool          // the root left the tree: end once notes are done; guarded by sv.mu
	wake  chan struct{} // capacity 1: notes or gone changed
}

func (l *treeLoop) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run is root's supervisor goroutine: it deals with the tree's failures
// until supervision ends (then the stages of the failures still queued
// resume with the handlers they have) or the root leaves.
func (sv *supervision) run(ctx context.Context, root *supNode, l *treeLoop) {
	defer sv.wg.Done()
	for {
		sv.mu.Lock()
		if sv.ended || ctx.Err() != nil {
			rest := l.notes
			l.notes = nil
			sv.mu.Unlock()
			for _, n := range rest {
				n.st.queue.Resume()
			}
			return
		}
		if len(l.notes) == 0 {
			gone := l.gone
			sv.mu.Unlock()
			if gone {
				return
			}
			select {
			case <-l.wake:
			case <-ctx.Done():
			case <-sv.quit:
			}
			continue
		}
		n := l.notes[0]
		l.notes = l.notes[1:]
		sv.mu.Unlock()
		sv.handle(ctx, n)
	}
}

// handle applies the supervisors' strategies to one failure: restart,
// or give up and escalate, up to the root.
func (sv *supervision) handle(ctx context.Context, n supNote) {
	paused := []*Stage{n.st} // the pause report took
	defer func() {
		for _, s := range paused {
			s.queue.Resume()
		}
	}()
	sv.mu.Lock()
	p := sv.parentOf[n.st]
	left := sv.ended || p == nil || p.root().failed // ended, or its tree failed for good
	sv.mu.Unlock()
	if left {
		return
	}
	if n.instance != n.st.instanceNumber() {
		return // the handler that failed was already replaced
	}
	sv.mu.Lock()
	node, child, cause := sv.parentOf[n.st], supChild{st: n.st}, n.err
	for node != nil && !sv.ended {
		if !sv.allow(node) {
			sv.m.log.Error("supervisor gave up", "supervisor", node.name, "restarts", node.cfg.MaxRestarts,
				"period", node.cfg.Period, "err", cause)
			if node.parent == nil && node.cfg.OnGiveUp == GiveUpStop {
				sv.endLocked()
				sv.mu.Unlock()
				sv.m.gaveUp(node.name, cause)
				return
			}
			if node.parent == nil {
				node.failed = true
				stages := supChild{node: node}.stages(nil)
				sv.mu.Unlock()
				sv.m.failStages(node.name, cause, stages)
				return
			}
			child, node = supChild{node: node}, node.parent
			continue
		}
		targets := sv.affected(node, child)
		if targets == nil {
			break // the child left the tree meanwhile
		}
		var stages []*Stage
		for _, c := range targets {
			c.reset()
			stages = c.stages(stages)
		}
		delay := node.backoff()
		sv.mu.Unlock()
		for _, s := range stages {
			s.queue.Pause()
			paused = append(paused, s)
		}
		if !sv.sleep(ctx, delay) {
			return // stopping: the stages resume with the handlers they have
		}
		failed, err := sv.m.restart(ctx, node.name, stages)
		sv.mu.Lock()
		if failed == nil {
			break
		}
		// A fresh handler whose Init failed is another failure of the
		// child that holds it.
		child, cause = supChild{}, err
		for _, c := range node.children {
			if c.contains(failed) {
				child = c
			}
		}
		if child.st == nil && child.node == nil {
			break
		}
	}
	sv.mu.Unlock()
}

// allow records a restart by node now and reports whether its intensity
// permits it.
func (sv *supervision) allow(node *supNode) bool {
	now := sv.now()
	cut := now.Add(-node.cfg.Period)
	h := node.history[:0]
	for _, t := range node.history {
		if t.After(cut) {
			h = append(h, t)
		}
	}
	node.history = append(h, now)
	return len(node.history) <= node.cfg.MaxRestarts
}

// backoff is how long node waits before the restart allow just recorded:
// Backoff doubled for each earlier restart within the period, at most
// MaxBackoff. sv.mu is held.
func (n *supNode) backoff() time.Duration {
	d, limit := n.cfg.Backoff, n.cfg.MaxBackoff
	for i := 1; i < len(n.history) && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// sleep waits d on the manager's clock (Options.After); it reports false
// if supervision ends or ctx is done first.
func (sv *supervision) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	var c <-chan time.Time
	if sv.m.opts.After != nil {
		c = sv.m.opts.After(d)
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
	case <-sv.quit:
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

// affected returns the children of node to restart when child failed, or
// nil if child is no longer there.
func (sv *supervision) affected(node *supNode, child supChild) []supChild {
	i := slices.IndexFunc(node.children, child.is)
	if i < 0 {
		return nil
	}
	switch node.cfg.Strategy {
	case OneForAll:
		return slices.Clone(node.children)
	case RestForOne:
		return slices.Clone(node.children[i:])
	}
	return []supChild{child}
}

// restart replaces the handlers of stages (paused by the caller) by fresh
// ones: it waits for their running batches, destroys the old handlers in
// reverse order, then makes and initializes new ones in order. It returns
// the first stage whose new handler failed Init.
func (m *Manager) restart(ctx context.Context, supervisor string, stages []*Stage) (*Stage, error) {
	for _, s := range stages {
		if err := s.waitIdle(ctx, supervisor); err != nil {
			m.log.Warn("restart abandoned", "supervisor", supervisor, "stage", s.name, "err", err)
			return nil, nil
		}
	}
	// Hold off DestroyStage and Shutdown while the handlers are swapped,
	// and leave alone the stages they have ended meanwhile: a handler is
	// destroyed exactly once, and none is made for an ended stage.
	live := stages[:0:0]
	for _, s := range stages {
		s.lifeMu.Lock()
		defer s.lifeMu.Unlock()
		if !s.ended {
			live = append(live, s)
		}
	}
	stages = live
	for i := len(stages) - 1; i >= 0; i-- {
		s := stages[i]
		if d, ok := s.Handler().(Destroyer); ok {
			if err := m.destroyHandler(s, d); err != nil {
				m.log.Warn("destroy before restart failed", "stage", s.name, "err", err)
			}
		}
	}
	var failed *Stage
	var failErr error
	for _, s := range stages {
		h := s.cfg.Factory()
		var err error
		if h == nil {
			err = fmt.Errorf("%w: stage %q: factory returned a nil handler", ErrInit, s.name)
			h = HandlerFunc(func([]sink.Event) error { return err })
		}
		inst := &instance{h: h, n: s.cur.Load().n + 1}
		s.cur.Store(inst)
		s.restarts.Add(1)
		if err == nil {
			err = m.initStage(s)
		}
		if err != nil {
			m.log.Error("restarted handler failed to initialize", "stage", s.name, "supervisor", supervisor, "err", err)
			s.failures.Add(1)
			m.notify(s, StageFailed{Failure{Stage: s.name, Err: err, Time: time.Now(), Instance: inst.n}}, false)
			if failed == nil {
				failed, failErr = s, err
			}
			continue
		}
		m.log.Info("stage restarted", "stage", s.name, "supervisor", supervisor, "instance", inst.n)
		m.notify(s, StageRestarted{Stage: s.name, Supervisor: supervisor, Instance: inst.n, Time: time.Now()}, false)
	}
	return failed, failErr
}

// restartWaitWarn is how long a restart waits for a running batch before
// it logs that it is still waiting.
const restartWaitWarn = 5 * time.Second

// waitIdle waits until no batch of s is running. The caller has paused its
// queue, so no new batch starts. A handler that never returns holds up the
// restart, and with it its supervision tree (not others), until the
// manager stops; a warning names the stage after restartWaitWarn.
func (s *Stage) waitIdle(ctx context.Context, supervisor string) error {
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

// gaveUp stops the manager after its root supervisor gave up.
func (m *Manager) gaveUp(root string, cause error) {
	err := fmt.Errorf("%w: root supervisor %q: %w", ErrGaveUp, root, cause)
	m.errMu.Lock()
	if m.cause == nil {
		m.cause = err
	}
	m.errMu.Unlock()
	m.log.Error("root supervisor gave up: stopping the manager", "supervisor", root, "err", cause)
	m.mu.RLock()
	running := m.state == stateRunning
	m.mu.RUnlock()
	if !running {
		return // a shutdown is under way and will close Done
	}
	timeout := 10 * time.Second
	if m.config != nil && m.config.Global.Shutdown > 0 {
		timeout = m.config.Global.Shutdown
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil && !errors.Is(err, ErrManagerClosed) {
			m.log.Error("shutdown after supervisor gave up", "err", err)
		}
	}()
}

// Done returns a channel closed when the manager has stopped: after
// Shutdown, or after the shutdown a root supervisor started when it gave
// up. Commands wait on it beside their signals.
func (m *Manager) Done() <-chan struct{} { return m.done }

// Err returns why the manager stopped, once Done is closed: nil after a
// clean Shutdown, an error wrapping ErrGaveUp if a root supervisor gave up
// (joined with any shutdown error), or the error Shutdown or Start
// returned.
func (m *Manager) Err() error {
	select {
	case <-m.done:
	default:
		return nil
	}
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.err
}

// finish records the final error and closes Done, once.
func (m *Manager) finish(err error) {
	m.doneOnce.Do(func() {
		m.errMu.Lock()
		m.err = errors.Join(m.cause, err)
		m.errMu.Unlock()
		close(m.done)
	})
}

// terminationReason is what Shutdown tells monitors.
func (m *Manager) terminationReason() (TerminationReason, error) {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	if m.cause != nil {
		return ReasonGaveUp, m.cause
	}
	return ReasonShutdown, nil
}

// Supervisors returns the names of the supervisors (groups and stages' own),
// sorted.
func (m *Manager) Supervisors() []string {
	sv := &m.sup
	sv.mu.Lock()
	defer sv.mu.Unlock()
	names := make([]string, 0, len(sv.nodes))
	for n := range sv.nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
