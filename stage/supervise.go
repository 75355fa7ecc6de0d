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

// Supervision: who owns what.
//
// The supervision tree (supTree: the supervisors, each stage's supervisor,
// restart histories, a root's failed flag) and the failures being dealt
// with (treeWork) belong to one goroutine, the supervisor (supervisor.run),
// from Start until supervision ends (Shutdown, the end of Start's context,
// or a root that gave up with onGiveUp stop), as in suture's serviceLoop.
// Everything that reads or changes them comes to it as a message (a
// func(*supervisor)) on supervision.ctl: a failure, adding or removing a
// supervised stage, Supervisors, a worker's report. Before Start and after
// the supervisor has returned, no goroutine runs and the tree is under
// supervision.mu instead (suture's not-running state); start and the
// supervisor's return hand it over explicitly (supervision.tree is nil
// while the supervisor owns it).
//
// The supervisor never waits on anything but its next message. A restart
// (its backoff, the wait for the stages' running batches, Destroy and
// Init) and the failing of a root's stages run in a worker goroutine,
// one at a time per tree, which reports back with a message; the tree's
// further failures wait in order (treeWork.notes), other trees go on.
//
// A failing batch never waits for supervision beyond the supervisor
// taking its message. Whether the failure is a crash, so that the stage's
// queue is paused before anyone hears of it, it decides alone from
// Stage.restartOn: the stage's supervisor's RestartOn, an atomic the
// tree's owner sets when the stage joins or leaves a supervisor.
//
// Locks: supervision.mu (the tree while unowned, the restarts under way
// for Shutdown to see) and no other; none is held across a call into
// another layer or a wait for the supervisor. Stage.lifeMu orders a
// worker's handler swap with DestroyStage and Shutdown ending the stage;
// a worker holding it may take supervision.mu, never the reverse.
//
// Shutdown waits for a restart in a handler's Destroy or Init only until
// its context ends: it then leaves the stages that restart holds to its
// worker, which destroys the handlers it made once the hung call returns
// (supervision.stop, Manager.endAbandoned). DestroyStageContext waits for
// the stage's lifeMu until its context ends the same way, naming the
// restart's step (restartStepOf); the stage is then ended once the
// restart lets go of it (Manager.endStageContext).

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

// supNode is a supervisor: a stage's own or a group. Owned with the tree
// (see supTree); cfg and name never change after newSupNode.
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

// supTree is the manager's supervisors and who supervises each stage. It
// has one owner at a time (see the note at the top of this file): the
// supervisor goroutine while it runs, else whoever holds supervision.mu.
// Its methods are plain data operations: they call into no other layer.
type supTree struct {
	nodes    map[string]*supNode
	parentOf map[*Stage]*supNode // each supervised stage's supervisor
}

// setParent makes n the supervisor of s, and publishes n's RestartOn to
// s's failing batches (Stage.restartOn).
func (t *supTree) setParent(s *Stage, n *supNode) {
	t.parentOf[s] = n
	s.restartOn.Store(&n.cfg.RestartOn)
}

// addOwn gives s its own supervisor.
func (t *supTree) addOwn(s *Stage, cfg SupervisorConfig) error {
	if _, dup := t.nodes[s.name]; dup {
		return fmt.Errorf("%w: stage %q: a supervisor of that name exists", ErrSupervisor, s.name)
	}
	n := newSupNode(s.name, cfg)
	n.own, n.children = s, []supChild{{st: s}}
	t.nodes[s.name] = n
	t.setParent(s, n)
	return nil
}

// group makes the group name over cfg.Children; stages are the children
// that name stages, looked up by the caller.
func (t *supTree) group(name string, cfg SupervisorConfig, stages map[string]*Stage) error {
	if _, dup := t.nodes[name]; dup {
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
		if st := stages[cn]; st != nil {
			switch p := t.parentOf[st]; {
			case p != nil && p.own == st:
				c.node = p
			case p != nil:
				return fmt.Errorf("%w: supervisor %q: stage %q is already supervised by %q", ErrSupervisor, name, cn, p.name)
			case st.cfg.Factory == nil:
				return fmt.Errorf("%w: supervisor %q: stage %q: %w", ErrSupervisor, name, cn, errNoFactory)
			default:
				c.st = st
			}
		} else if n := t.nodes[cn]; n != nil && n.own == nil {
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
			t.setParent(c.st, node)
		} else {
			c.node.parent = node
		}
	}
	t.nodes[name] = node
	return nil
}

// remove takes a destroyed stage out of the tree, with its own supervisor.
func (t *supTree) remove(s *Stage) {
	s.restartOn.Store(nil)
	p := t.parentOf[s]
	delete(t.parentOf, s)
	if p == nil {
		return
	}
	p.children = slices.DeleteFunc(p.children, func(c supChild) bool { return c.st == s })
	if p.own == s {
		delete(t.nodes, p.name)
		if gp := p.parent; gp != nil {
			gp.children = slices.DeleteFunc(gp.children, func(c supChild) bool { return c.node == p })
		}
	}
}

func (t *supTree) names() []string {
	names := make([]string, 0, len(t.nodes))
	for n := range t.nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// supNote is a failure for the supervisor to deal with. Its stage's queue
// is paused (by supervision.pause) until the note is dealt with.
type supNote struct {
	st       *Stage
	instance uint64
	err      error
}

// supervision is the manager's side of supervision: what goroutines other
// than the supervisor call (CreateStage, DestroyStage, Supervise, a
// failing batch, Start, Shutdown), turned into messages to the supervisor
// goroutine while it runs. See the note at the top of this file.
type supervision struct {
	m *Manager
	// ctl carries messages to the supervisor goroutine. Unbuffered: a
	// message sent is one the supervisor has taken, so none is left
	// behind when it returns (senders then see done closed).
	ctl  chan func(*supervisor)
	done chan struct{} // closed when the supervisor goroutine has returned

	// mu guards tree while no goroutine owns it (before Start, after the
	// supervisor returned), cancel, restarting and abandoned. It is never
	// held across a call into another layer, nor while waiting for the
	// supervisor.
	mu     sync.Mutex
	tree   *supTree           // nil while the supervisor goroutine owns it
	cancel context.CancelFunc // ends supervision; set by start
	// restarting is the stages whose handlers a worker is replacing (it
	// holds their lifeMu, or is about to take it), each with the step it
	// is at, for stop to name.
	restarting map[*Stage]string
	// abandoned: stop's context ended while workers held stages. Shutdown
	// leaves those stages alone: their workers end them (endAbandoned).
	abandoned bool

	wg sync.WaitGroup // the supervisor goroutine and its workers
}

func (sv *supervision) init(m *Manager) {
	sv.m = m
	sv.ctl = make(chan func(*supervisor))
	sv.done = make(chan struct{})
	sv.tree = &supTree{nodes: map[string]*supNode{}, parentOf: map[*Stage]*supNode{}}
	sv.restarting = map[*Stage]string{}
}

// post hands f to the supervisor goroutine; it reports false if the
// supervisor has returned. Called only once start has run.
func (sv *supervision) post(f func(*supervisor)) bool {
	select {
	case sv.ctl <- f:
		return true
	case <-sv.done:
		return false
	}
}

// withTree runs f on the tree, in the supervisor goroutine while it runs,
// else here under sv.mu, and returns f's error.
func (sv *supervision) withTree(f func(*supTree) error) error {
	sv.mu.Lock()
	if t := sv.tree; t != nil {
		defer sv.mu.Unlock()
		return f(t)
	}
	sv.mu.Unlock()
	reply := make(chan error, 1)
	if sv.post(func(l *supervisor) { reply <- f(l.tree) }) {
		return <-reply
	}
	// The supervisor returned meanwhile and handed the tree back.
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return f(sv.tree)
}

// addOwn gives s its own supervisor.
func (sv *supervision) addOwn(s *Stage, cfg SupervisorConfig) error {
	return sv.withTree(func(t *supTree) error { return t.addOwn(s, cfg) })
}

// removeStage takes a destroyed stage out of the tree. Failures of s
// still waiting are then dropped and its queue resumed.
func (sv *supervision) removeStage(s *Stage) {
	_ = sv.withTree(func(t *supTree) error { t.remove(s); return nil })
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
	// Failures are dealt with per supervision tree: trees do not merge
	// under a running supervision.
	errStarted := fmt.Errorf("%w: supervisor %q: groups are set up before Start", ErrSupervisor, name)
	m.mu.RLock()
	started := m.state != stateNew
	m.mu.RUnlock()
	if started {
		return errStarted
	}
	if _, ok := m.Stage(name); ok {
		return fmt.Errorf("%w: supervisor %q: a stage has that name", ErrSupervisor, name)
	}
	stages := map[string]*Stage{}
	for _, cn := range cfg.Children {
		if st, ok := m.Stage(cn); ok {
			stages[cn] = st
		}
	}
	sv := &m.sup
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.tree == nil || sv.cancel != nil {
		return errStarted // Start came meanwhile
	}
	return sv.tree.group(name, cfg, stages)
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

// Supervisors returns the names of the supervisors (groups and stages' own),
// sorted.
func (m *Manager) Supervisors() []string {
	var names []string
	_ = m.sup.withTree(func(t *supTree) error { names = t.names(); return nil })
	return names
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
// once it has dealt with the failure. It waits for nothing but the
// supervisor taking the message.
func (sv *supervision) report(s *Stage, instance uint64, err error, paused bool) {
	if !paused {
		return
	}
	n := supNote{st: s, instance: instance, err: err}
	if !sv.post(func(l *supervisor) { l.failed(n) }) {
		s.queue.Resume() // supervision has ended
	}
}

// start hands the tree to the supervisor goroutine, which supervises
// until stop or the end of ctx.
func (sv *supervision) start(ctx context.Context) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	ctx, sv.cancel = context.WithCancel(ctx)
	l := &supervisor{sv: sv, m: sv.m, tree: sv.tree, ctx: ctx, end: sv.cancel, trees: map[*supNode]*treeWork{}}
	sv.tree = nil
	sv.wg.Add(1)
	go l.run()
}

// stop ends supervision (no more restarts) and waits for the supervisor
// goroutine and its workers, until ctx ends. A restart in progress is
// abandoned at its next wait (backoff, running batches) and its stages
// resume with the handlers they have; one already in a handler's Destroy
// or Init is waited for. If ctx ends first while workers hold stages (or
// wait for a DestroyStage to let go of one), stop gives up on them: it
// returns those stages, which the caller must leave alone (their workers
// end them when the hung call returns: endAbandoned), and an error
// wrapping ErrNotStopped that names what each restart is stuck in. The
// supervisor goroutine then returns once its last worker has reported.
func (sv *supervision) stop(ctx context.Context) (held []*Stage, err error) {
	sv.mu.Lock()
	cancel := sv.cancel
	sv.mu.Unlock()
	if cancel == nil {
		return nil, nil // never started
	}
	cancel()
	select {
	case <-sv.done:
		sv.wg.Wait()
		return nil, nil
	case <-ctx.Done():
	}
	sv.mu.Lock()
	var names, steps []string
	for s, step := range sv.restarting {
		held = append(held, s)
		names = append(names, s.name)
		steps = append(steps, fmt.Sprintf("stage %q %s", s.name, step))
	}
	sv.abandoned = len(held) > 0
	sv.mu.Unlock()
	if len(held) == 0 {
		// Every worker left is at a wait that ends with supervision
		// (backoff, running batches), failing a root's stages (which
		// waits for nothing) or reporting: the supervisor returns at once.
		<-sv.done
		sv.wg.Wait()
		return nil, nil
	}
	slices.Sort(names)
	slices.Sort(steps)
	what := "supervisor restart still running: " + strings.Join(steps, ", ")
	sv.m.log.Error("shutdown abandoned a supervisor restart: its worker ends the stages when the hung call returns",
		"stages", names, "waiting", what, "err", context.Cause(ctx))
	return held, fmt.Errorf("%w: %s: %w", ErrNotStopped, what, context.Cause(ctx))
}

// beginRestart records that a worker is about to take the lifeMu of
// stages and replace their handlers. It reports false if supervision has
// ended (ctx): the restart must not begin. Once ctx has ended no worker
// registers, so stop's look at restarting sees every worker that holds,
// or waits for, a stage's lifeMu.
func (sv *supervision) beginRestart(ctx context.Context, stages []*Stage) bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	for _, s := range stages {
		sv.restarting[s] = "waiting for a DestroyStage under way"
	}
	return true
}

// endRestartIfAbandoned is endRestart if stop has given up on the
// workers, else it records that the stages' restart begins; it reports
// which.
func (sv *supervision) endRestartIfAbandoned(stages []*Stage) bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if !sv.abandoned {
		for _, s := range stages {
			sv.restarting[s] = "waiting for its turn in the restart"
		}
		return false
	}
	for _, s := range stages {
		delete(sv.restarting, s)
	}
	return true
}

// restartStep records the step the restart of s is at.
func (sv *supervision) restartStep(s *Stage, step string) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.restarting[s] = step
}

// restartStepOf returns the step a restart of s is at, if one holds or
// waits for s's lifeMu.
func (sv *supervision) restartStepOf(s *Stage) (string, bool) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	step, ok := sv.restarting[s]
	return step, ok
}

// endRestart forgets the restart of stages and reports whether stop gave
// up on it meanwhile: the stages' handlers are then the worker's to end.
func (sv *supervision) endRestart(stages []*Stage) (abandoned bool) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	for _, s := range stages {
		delete(sv.restarting, s)
	}
	return sv.abandoned
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
	tree  *supTree
	ctx   context.Context // ends with supervision: workers give up their waits
	end   context.CancelFunc
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
// and its workers have reported back, handing the tree back to sv.mu.
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
	l.sv.mu.Lock()
	l.sv.tree = l.tree
	l.sv.mu.Unlock()
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
	p := l.tree.parentOf[n.st]
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
	p := l.tree.parentOf[n.st]
	if l.ended || p == nil || p.root().failed {
		return // ended, left the tree, or its tree failed for good
	}
	if n.instance != n.st.instanceNumber() {
		return // the handler that failed was already replaced
	}
	l.escalate(tw, p, supChild{st: n.st}, n.err)
}

// escalate applies the supervisors' strategies to a failure of child of
// node: restart (in a worker), or give up and escalate, up to the root.
func (l *supervisor) escalate(tw *treeWork, node *supNode, child supChild, cause error) {
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
				l.work(tw, node, func() (*Stage, error) {
					l.m.failStages(name, cause, stages)
					return nil, nil
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
		for _, s := range stages {
			s.queue.Pause()
			tw.paused = append(tw.paused, s)
		}
		delay, ctx, name := node.backoff(), l.ctx, node.name
		l.work(tw, node, func() (*Stage, error) {
			if !l.m.sleep(ctx, delay) {
				return nil, nil // stopping: the stages resume with the handlers they have
			}
			return l.m.restart(ctx, name, stages)
		})
		return
	}
}

// work runs job, which deals with tw's current failure for node, in a
// worker goroutine that reports back to worked.
func (l *supervisor) work(tw *treeWork, node *supNode, job func() (*Stage, error)) {
	tw.busy = true
	l.busy++
	ctl := l.sv.ctl
	l.sv.wg.Add(1)
	go func() {
		defer l.sv.wg.Done()
		failed, err := job()
		// The supervisor runs until every worker has reported.
		ctl <- func(l *supervisor) { l.worked(tw, node, failed, err) }
	}()
}

// worked takes a worker's report: failed is a stage whose fresh handler
// failed Init (err), another failure of node's child that holds it.
func (l *supervisor) worked(tw *treeWork, node *supNode, failed *Stage, err error) {
	l.busy--
	tw.busy = false
	if failed != nil && !l.ended {
		for _, c := range node.children {
			if c.contains(failed) {
				l.escalate(tw, node, c, err)
				break
			}
		}
	}
	if !tw.busy {
		l.settle(tw)
		l.next(tw)
	}
}

// allow records a restart by node now and reports whether its intensity
// permits it.
func (l *supervisor) allow(node *supNode) bool {
	now := l.now()
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
// MaxBackoff.
func (n *supNode) backoff() time.Duration {
	d, limit := n.cfg.Backoff, n.cfg.MaxBackoff
	for i := 1; i < len(n.history) && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// affected returns the children of node to restart when child failed, or
// nil if child is no longer there.
func affected(node *supNode, child supChild) []supChild {
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

// The rest runs in workers.

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
	// From here on Shutdown sees what the restart is doing (stop names
	// it) and may give up waiting for it: the stages are then this
	// worker's to end (endAbandoned).
	if !m.sup.beginRestart(ctx, stages) {
		return nil, nil // supervision ended: the stages keep their handlers
	}
	registered := stages
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
	initialized := make([]bool, len(stages))
	if m.sup.endRestartIfAbandoned(registered) {
		// Shutdown gave up on this worker before it had its stages (a
		// DestroyStage held one): end them with the handlers they have.
		for i := range initialized {
			initialized[i] = true
		}
		m.endAbandoned(supervisor, stages, initialized)
		return nil, nil
	}
	for i := len(stages) - 1; i >= 0; i-- {
		s := stages[i]
		if d, ok := s.Handler().(Destroyer); ok {
			m.sup.restartStep(s, "in the old handler's Destroy")
			if err := m.destroyHandler(s, d); err != nil {
				m.log.Warn("destroy before restart failed", "stage", s.name, "err", err)
			}
		}
		m.sup.restartStep(s, "waiting for the restart of the stages before it")
	}
	var failed *Stage
	var failErr error
	for i, s := range stages {
		m.sup.restartStep(s, "in its factory or the new handler's Init")
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
			m.sup.restartStep(s, "in the new handler's Init")
			err = m.initStage(s)
		}
		m.sup.restartStep(s, "restarted, waiting for the restart of the stages after it")
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
	if m.sup.endRestart(registered) {
		m.endAbandoned(supervisor, stages, initialized)
		return nil, nil
	}
	return failed, failErr
}

// endAbandoned ends stages whose restart Shutdown gave up waiting for
// (it did not destroy them): their handlers that initialized are
// destroyed, and no handler is made for them again. The caller holds
// their lifeMu.
func (m *Manager) endAbandoned(supervisor string, stages []*Stage, initialized []bool) {
	names := make([]string, len(stages))
	var errs []error
	for i, s := range stages {
		names[i] = s.name
		s.ended = true
		if d, ok := s.Handler().(Destroyer); ok && initialized[i] {
			if err := m.destroyHandler(s, d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	m.log.Warn("abandoned restart finished after shutdown: its handlers are destroyed", "supervisor", supervisor,
		"stages", names, "err", errors.Join(errs...))
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
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		err := m.shutdown(ctx)
		if err != nil {
			m.log.Error("shutdown after supervisor gave up", "err", err)
		}
		m.finish(err)
	}()
}
