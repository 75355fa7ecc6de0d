package stage

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
)

// Supervision is split by responsibility:
//
//   - supervise.go: the configuration (SupervisorConfig, its checks) and
//     the Manager's supervision API (Supervise, CreateSupervised,
//     Supervisors);
//   - supervise_tree.go: the tree of supervisors and the strategies
//     (which children a failure restarts), plain data;
//   - supervise_owner.go: the tree's owner, the supervisor goroutine, and
//     the messages every other goroutine sends it;
//   - supervise_restart.go: what the owner's workers do (backoff, the
//     restart itself, failing a root's stages) and the backoff decision.
//
// Who owns what. Everything supervision knows (supState: the tree, each
// supervisor's restart history, the restarts under way and which stages
// have ended) has one owner at a time, as in suture: the supervisor
// goroutine (supervisor.run) from Start until supervision ends, else the
// one caller that holds supervision.idle, a channel of capacity one that
// holds the state while no goroutine runs. supervision.run is the one
// way in: it hands a function to the supervisor goroutine as a message if
// it runs, else takes the state from idle, runs it and puts it back.
// Failures, adding and removing supervised stages, Supervisors, a
// worker's report (which hands back the stages the owner gave it),
// DestroyStage's and Shutdown's ends of a stage, stop and give-ups are
// all such messages. There is no lock beside it.
//
// The supervisor goroutine never waits on anything but its next message.
// What takes time (a backoff, waiting for a restarted stage's running
// batches, Destroy and Init, failing a root's stages) runs in a worker
// goroutine, one at a time per tree, owned (started and waited for) by
// the supervisor goroutine, which runs until its last worker has
// reported back. The supervisor hands a restart worker the stages it
// restarts and the pauses to undo: the worker resumes the queues once the
// restart has succeeded, without waiting for its report to be taken.
//
// Ending a stage (DestroyStage, Shutdown) is one message too: the owner
// marks the stage ended and hands its last handler to the caller to
// destroy, unless a restart worker holds the stage (from its dispatch to
// its report: its backoff, the wait for running batches, Destroy and
// Init). Then the caller waits, until its context ends, for the stage to
// be ended once the restart is done (by an ender worker the owner starts
// on the restart's report); a caller that stops waiting gets an error
// naming the restart's step, and the stage is ended when the hung call
// returns. Shutdown and DestroyStageContext deal with a hung restart this
// one way (Manager.endStages).

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

// NoBackoff as SupervisorConfig.Backoff turns crash-loop backoff off
// (any negative value does; YAML: `backoff: off` or an explicit 0).
const NoBackoff time.Duration = -1

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
// FailEvent restart the handler only with RestartOn error.
//
// Only crash loops back off: a restarted handler that fails before it has
// handled anything successfully, within Period of the supervisor's
// previous restart. The k-th restart of such a loop waits Backoff·2^(k-1),
// at most MaxBackoff, with jitter (a uniform wait between half of that
// and all of it; Options.Rand), on Options.After's clock; its stages'
// queues keep their events meanwhile. A handler that has handled events
// and then fails (a rare poison event) is restarted at once, however many
// restarts came before, and ends the loop. Backoff off (NoBackoff, YAML
// `backoff: off`) restarts a crash loop at once too.
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
	// Backoff is the wait before the first restart of a crash loop;
	// each further one doubles it, with jitter (see above). Zero or
	// absent → 10ms. Negative (NoBackoff) → off: no wait. In YAML,
	// `backoff: off` and an explicit `backoff: 0` (or 0s) turn it off
	// and a negative duration is an error.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff bounds the wait (0 → 1s, at least Backoff).
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
	if c.MaxBackoff < 0 {
		return &problem{[]string{"maxBackoff"}, fmt.Sprintf("negative duration %v", c.MaxBackoff)}
	}
	if c.MaxBackoff > 0 && c.Backoff > c.MaxBackoff { // a negative Backoff is off
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

// yamlBackoffs reads the `backoff` keys of a file's supervisor blocks
// (stages.NAME.supervisor and supervisors.NAME) before they are decoded:
// `off` and an explicit zero turn backoff off (they become NoBackoff), a
// negative duration is an error located at its key. Other values are
// left to decoding.
func yamlBackoffs(stages, groups *yaml.Node) error {
	var errs []error
	read := func(block *yaml.Node, path string) {
		b := lookup(block, "backoff")
		if b == nil || b.Kind != yaml.ScalarNode {
			return
		}
		off := b.Value == "off"
		if !off {
			d, err := time.ParseDuration(b.Value)
			if err != nil && b.Value != "0" {
				return
			}
			if d < 0 {
				errs = append(errs, yamlstrict.Errorf(b, yamlstrict.Join(path, "backoff"),
					"negative duration %v (write off to turn backoff off)", d))
				return
			}
			off = d == 0
		}
		if off {
			b.Value, b.Tag, b.Style = NoBackoff.String(), "!!str", 0
		}
	}
	each := func(n *yaml.Node, f func(name string, v *yaml.Node)) {
		if n == nil || n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			f(n.Content[i].Value, n.Content[i+1])
		}
	}
	each(stages, func(name string, v *yaml.Node) {
		read(lookup(v, "supervisor"), yamlstrict.Join(yamlstrict.Join("stages", name), "supervisor"))
	})
	each(groups, func(name string, v *yaml.Node) { read(v, yamlstrict.Join("supervisors", name)) })
	return yamlstrict.Collect(errs...)
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
	var err error
	m.sup.run(func(st *supState, _ *supervisor) {
		if st.started {
			err = errStarted // Start came meanwhile
			return
		}
		err = st.tree.group(name, cfg, stages)
	})
	return err
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
	m.sup.run(func(st *supState, _ *supervisor) { names = st.tree.names() })
	return names
}
