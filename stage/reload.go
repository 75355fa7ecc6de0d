package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// Reload: a running manager takes a new configuration without a restart
// (the thesis's dynamic stage creation put to work, DESIGN §12). What it
// does, in this order, so that no event is lost:
//
//  1. check the whole configuration with the registry (the checks Load
//     makes) and build the changed predicates: any error refuses the
//     reload whole, and the running configuration stays; so does removing
//     a stage that a kept stage's running args still send to;
//  2. create and start the added stages (their Init runs), in graph
//     order: a stage whose args name another added stage comes after it;
//  3. apply the changes of the kept stages in place: queue threshold and
//     max_time, predicate, thread-pool bounds and controller, batching;
//  4. remove the stages the file no longer has: their sinks refuse new
//     events at once (the error says the stage was removed), their queues
//     drain, then their handlers are destroyed.
//
// What a running stage cannot take in place (its handler or args, its
// scheduler, ordering, supervisor, dispatch rate, a global section such
// as aio's or the profiler's, the supervisors block) is left as it runs
// and named in ReloadSummary.NotApplied: it takes effect at the next
// restart. Connections (aio sockets, HTTP) are never closed by a reload.

// SignalReloaded is raised after each Reload that applied; its event is
// Reloaded. A handler that keeps something its Init took from the
// configuration, such as its stage's predicate (enqueuepred.ResponseTimeOf
// of Context.Stage().Sink().Predicate()), subscribes to it in Init
// (Manager.SubscribeFunc, ended in Destroy) and looks again: a reload that
// changes the predicate installs a new one (Haboob's Checksum and Arashi's
// pages hand it to their enqueuepred.Degrader with Retarget).
const SignalReloaded = "reloaded"

// Reloaded is the event of SignalReloaded.
type Reloaded struct{ Summary *ReloadSummary }

// ReloadSummary says what a Reload did, for the log.
type ReloadSummary struct {
	File    string        // the configuration's file ("" for one parsed from memory)
	Added   []string      // stages created and started
	Removed []string      // stages drained and destroyed
	Changed []StageChange // stages changed in place
	// Global names the keys of `global:` applied in place (shutdown).
	Global []string
	// NotApplied names each change the running manager cannot take in
	// place, as "key: reason"; it applies at the next restart.
	NotApplied []string
	// Errors are what went wrong removing stages (a drain that did not
	// finish within the shutdown bound: ErrEventsDiscarded); the reload
	// itself applied.
	Errors []error
}

// StageChange is a stage changed in place by a Reload.
type StageChange struct {
	Stage string
	Keys  []string // the keys that changed: queue.threshold, predicate, threadpool.max, …
}

// Empty reports whether the reload changed nothing and left nothing
// unapplied.
func (r *ReloadSummary) Empty() bool {
	return len(r.Added)+len(r.Removed)+len(r.Changed)+len(r.Global)+len(r.NotApplied)+len(r.Errors) == 0
}

// String describes the summary on one line.
func (r *ReloadSummary) String() string {
	if r.Empty() {
		return "no change"
	}
	var parts []string
	if len(r.Added) > 0 {
		parts = append(parts, "added "+strings.Join(r.Added, ", "))
	}
	if len(r.Removed) > 0 {
		parts = append(parts, "removed "+strings.Join(r.Removed, ", "))
	}
	for _, c := range r.Changed {
		parts = append(parts, fmt.Sprintf("changed %s (%s)", c.Stage, strings.Join(c.Keys, ", ")))
	}
	if len(r.Global) > 0 {
		parts = append(parts, "changed global ("+strings.Join(r.Global, ", ")+")")
	}
	if len(r.NotApplied) > 0 {
		parts = append(parts, "not applied until restart: "+strings.Join(r.NotApplied, "; "))
	}
	for _, err := range r.Errors {
		parts = append(parts, "error: "+err.Error())
	}
	return strings.Join(parts, "; ")
}

// ErrReloadRefused is wrapped by a Reload's error when it changed nothing
// for a reason other than the configuration's own errors (which are a
// *ConfigError): the manager is shut down, an added stage's Init failed
// (the stages added before it are removed again), the file would remove a
// stage a kept stage still sends to, or add one by the name of a stage
// made in Go. Several reasons are reported together; LogReload logs each.
var ErrReloadRefused = errors.New("stage: reload refused")

// Reload applies cfg to the running manager (or to one not started yet)
// in place, as described in docs/yaml.md ("Reloading"): changed
// predicates, queue thresholds, thread-pool and batching bounds apply to
// the running stages, added stages are created and started, removed ones
// stop intake, drain and are destroyed. Producers go on enqueueing
// meanwhile: an event a stage accepted is handled exactly once, and an
// event refused (by a removed stage, or by new thresholds) gets its error.
//
// A configuration with errors is refused whole: the error is a
// *ConfigError listing every one (file, line, key), as Load's, and
// nothing changes. Reloads are serialized. Config returns cfg afterwards;
// the summary names what could not apply in place.
//
// cfg.Node, if empty, is taken from the running configuration.
func (m *Manager) Reload(cfg *Config) (*ReloadSummary, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil configuration", ErrReloadRefused)
	}
	return m.reload(cfg, nil)
}

// ReloadFile reads the configuration file at path and applies it with
// Reload. The error of a file that does not load lists all its errors,
// those of ParseConfig and those the registry finds, at once.
func (m *Manager) ReloadFile(path string) (*ReloadSummary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReloadRefused, err)
	}
	cfg, perr := parseConfig(data, path)
	if cfg == nil {
		return nil, &ConfigError{File: path, Err: perr}
	}
	return m.reload(cfg, perr)
}

// CheckConfig parses a configuration document and checks it with the
// registry r (nil: DefaultRegistry) as Load does, reporting every error
// at once in one *ConfigError, but builds nothing. A command that checks
// more of its own before a Reload (Haboob: that a stage serves HTTP)
// reads the file once with it.
func CheckConfig(data []byte, file string, r *Registry) (*Config, error) {
	if r == nil {
		r = DefaultRegistry
	}
	cfg, perr := parseConfig(data, file)
	if cfg == nil {
		return nil, &ConfigError{File: file, Err: perr}
	}
	if err := checkLoad(cfg, r, perr); err != nil {
		return nil, err
	}
	return cfg, nil
}

// reload is Reload with the parse errors of cfg (nil if none).
func (m *Manager) reload(next *Config, parseErr error) (*ReloadSummary, error) {
	m.reloading.Lock()
	defer m.reloading.Unlock()
	m.mu.RLock()
	st := m.state
	m.mu.RUnlock()
	if st == stateStopping || st == stateStopped {
		return nil, fmt.Errorf("%w: %w", ErrReloadRefused, ErrManagerClosed)
	}
	cfg := *next // the caller's stays as it is
	prev := m.config.Load()
	if cfg.Node == "" && prev != nil {
		cfg.Node = prev.Node
	}
	if err := checkLoad(&cfg, m.registry, parseErr); err != nil {
		return nil, err
	}
	plan, err := m.planReload(prev, &cfg)
	if err != nil {
		return nil, err
	}
	sum := &ReloadSummary{File: cfg.File, Global: plan.global, NotApplied: plan.notApplied}
	if err := m.addStages(plan.added, sum); err != nil {
		return nil, err
	}
	for _, r := range plan.retunes {
		sum.NotApplied = append(sum.NotApplied, r.apply()...)
		if len(r.keys) > 0 {
			sum.Changed = append(sum.Changed, StageChange{Stage: r.s.name, Keys: r.keys})
		}
	}
	m.config.Store(&cfg)
	for _, s := range plan.removed {
		sum.Removed = append(sum.Removed, s.name)
		if err := m.removeStage(s); err != nil {
			sum.Errors = append(sum.Errors, err)
		}
	}
	m.raiseLogged(SignalReloaded, Reloaded{Summary: sum})
	return sum, nil
}

// addStages creates and starts the added stages, in order. If one fails
// (its Init), those created before it are destroyed again and the error
// refuses the reload.
func (m *Manager) addStages(added []NamedStageConfig, sum *ReloadSummary) error {
	var created []*Stage
	for _, ns := range added {
		f, _ := m.registry.Lookup(ns.Config.Handler) // checkLoad saw to it
		sc := ns.Config
		sc.Factory = f
		s, err := m.CreateStage(ns.Name, f(), sc)
		if err == nil {
			created = append(created, s)
			continue
		}
		for i := len(created) - 1; i >= 0; i-- {
			if derr := m.removeStage(created[i]); derr != nil {
				m.log.Warn("reload: removing an added stage again", "stage", created[i].name, "err", derr)
			}
		}
		return fmt.Errorf("%w: stage %q: %w", ErrReloadRefused, ns.Name, err)
	}
	for _, s := range created {
		sum.Added = append(sum.Added, s.name)
	}
	return nil
}

// removeStage removes s as a Reload does: its sink refuses new events,
// saying why, what it holds is handled, then it is destroyed. The drain
// is bounded by ShutdownBound.
func (m *Manager) removeStage(s *Stage) error {
	s.removed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), m.ShutdownBound())
	defer cancel()
	return m.DestroyStageContext(ctx, s.name)
}

// removedError explains a refusal by a stage a Reload removed.
func (s *Stage) removedError(err error) error {
	if s.removed.Load() {
		return fmt.Errorf("stage %q removed by a configuration reload: %w", s.name, err)
	}
	return err
}

// reloadPlan is what a Reload will do, decided before it does anything.
type reloadPlan struct {
	added      []NamedStageConfig // in graph order
	removed    []*Stage           // in creation order: upstream first
	retunes    []*stageRetune
	global     []string // keys of global applied in place
	notApplied []string
}

// planReload compares the running configuration (prev, nil for a manager
// built in Go) and its stages with cfg. It builds the changed
// predicates, so that a predicate that does not build on this manager
// (a group rate declared anew with another rate) refuses the reload.
func (m *Manager) planReload(prev, cfg *Config) (*reloadPlan, error) {
	plan := &reloadPlan{}
	if prev == nil {
		prev = &Config{Global: fileDefaults()}
	}
	plan.global, plan.notApplied = diffGlobal(prev, cfg)
	wanted := map[string]bool{}
	for _, ns := range cfg.Stages {
		if ns.Config.HostedOn(cfg.Node) {
			wanted[ns.Name] = true
		}
	}
	fromFile := map[string]bool{} // the stages the running file made
	for _, ns := range prev.Stages {
		if ns.Config.HostedOn(prev.Node) {
			fromFile[ns.Name] = true
		}
	}
	for _, s := range m.Stages() {
		if fromFile[s.name] && !wanted[s.name] {
			plan.removed = append(plan.removed, s)
		}
	}
	if err := declareGroups(m, cfg); err != nil {
		return nil, err
	}
	var errs []error
	var added []NamedStageConfig
	for _, ns := range cfg.Stages {
		if !wanted[ns.Name] {
			continue
		}
		s, ok := m.Stage(ns.Name)
		if !ok {
			added = append(added, ns)
			continue
		}
		if !fromFile[ns.Name] {
			errs = append(errs, fmt.Errorf("stage %q: %w (created in Go, not by the configuration)", ns.Name, ErrStageExists))
			continue
		}
		r, err := m.planRetune(s, ns.Config)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(r.keys) > 0 || len(r.later) > 0 {
			plan.retunes = append(plan.retunes, r)
		}
	}
	// A kept stage goes on with the args its Init read (args change at a
	// restart): a stage they send to cannot go.
	for _, s := range m.Stages() {
		if !fromFile[s.name] || !wanted[s.name] {
			continue
		}
		for _, to := range argStages(m.registry, s.Config()) {
			if slices.ContainsFunc(plan.removed, func(r *Stage) bool { return r.name == to }) {
				errs = append(errs, fmt.Errorf("stage %q cannot be removed: stage %q sends to it (its running args name it, and args change only at a restart)", to, s.name))
			}
		}
	}
	if len(errs) > 0 {
		return nil, refusal(errs)
	}
	plan.added = graphOrder(added, m.registry)
	return plan, nil
}

// refusal is a reload refused for several reasons, each its own error
// (LogReload logs them one by one). It wraps ErrReloadRefused.
type refusal []error

func (r refusal) Error() string {
	lines := make([]string, len(r))
	for i, err := range r {
		lines[i] = ErrReloadRefused.Error() + ": " + err.Error()
	}
	return strings.Join(lines, "\n")
}

func (r refusal) Unwrap() []error { return append([]error{ErrReloadRefused}, r...) }

// diffGlobal compares the global blocks and the supervisors: what applies
// in place, and what waits for a restart.
func diffGlobal(prev, cfg *Config) (applied, later []string) {
	if prev.Global.Shutdown != cfg.Global.Shutdown {
		applied = append(applied, "shutdown")
	}
	if prev.Global.ThreadManager != cfg.Global.ThreadManager {
		later = append(later, "global.threadManager: the thread manager is chosen at start")
	}
	names := map[string]bool{}
	for name := range prev.Global.sections {
		names[name] = true
	}
	for name := range cfg.Global.sections {
		names[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		a, _ := prev.Global.Section(name)
		b, _ := cfg.Global.Section(name)
		if !reflect.DeepEqual(a, b) {
			later = append(later, "global."+name+": its package reads it at start (connections and listeners are kept)")
		}
	}
	if !reflect.DeepEqual(prev.Supervisors, cfg.Supervisors) {
		later = append(later, "supervisors: the supervision tree is built at start")
	}
	return applied, later
}

// graphOrder orders added stages so that a stage whose args name another
// added stage (Registry.StageArgs) is created after it, and its Init finds
// that stage's sink; otherwise, and in a cycle, file order.
func graphOrder(added []NamedStageConfig, r *Registry) []NamedStageConfig {
	index := map[string]int{}
	for i, ns := range added {
		index[ns.Name] = i
	}
	deps := make([][]int, len(added))
	for i, ns := range added {
		for _, name := range argStages(r, ns.Config) {
			if j, ok := index[name]; ok && j != i {
				deps[i] = append(deps[i], j)
			}
		}
	}
	out := make([]NamedStageConfig, 0, len(added))
	done := make([]bool, len(added))
	for len(out) < len(added) {
		progress := false
		for i, ns := range added {
			if done[i] || slices.ContainsFunc(deps[i], func(j int) bool { return !done[j] }) {
				continue
			}
			done[i], progress = true, true
			out = append(out, ns)
		}
		if !progress { // a cycle: the rest in file order
			for i, ns := range added {
				if !done[i] {
					done[i] = true
					out = append(out, ns)
				}
			}
		}
	}
	return out
}

// argStages returns the stage names a stage's args give where its
// handler declared stage names (Registry.StageArgs).
func argStages(r *Registry, sc StageConfig) []string {
	var names []string
	for _, key := range r.stageArgKeys(sc.Handler) {
		walkArgs(nodeOf(sc.Args), "", strings.Split(key, "."), func(n *yaml.Node, _ string) {
			if n.Kind == yaml.ScalarNode && n.Value != "" {
				names = append(names, n.Value)
			}
		})
	}
	return names
}

// ReloadOnSignal reloads m from the configuration file at path on every
// SIGHUP until ctx ends, logging each reload's summary at INFO and each
// error of a refused one at ERROR (LogReload); the running configuration
// stays when a reload is refused. It blocks: run it in a goroutine that
// the caller waits for.
func ReloadOnSignal(ctx context.Context, m *Manager, path string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		sum, err := m.ReloadFile(path)
		LogReload(log, path, sum, err)
	}
}

// LogReload logs a reload's outcome: the summary at INFO (the errors of
// removing stages at WARN), or, for a refused reload, every error at
// ERROR, one record each, saying that the running configuration stays.
func LogReload(log *slog.Logger, file string, sum *ReloadSummary, err error) {
	if log == nil {
		return
	}
	if err != nil {
		reasons := []error{err}
		if r, ok := err.(refusal); ok {
			reasons = r
		}
		for _, reason := range reasons {
			errs := []error{reason}
			if ce, ok := reason.(*ConfigError); ok {
				errs = nil
				for _, e := range ce.Errors() {
					errs = append(errs, &ConfigError{File: ce.File, Err: e})
				}
			}
			for _, e := range errs {
				log.Error("reload refused: the running configuration stays", "file", file, "err", e)
			}
		}
		return
	}
	log.Info("configuration reloaded", "file", file, "changes", sum.String())
	for _, e := range sum.Errors {
		log.Warn("reload: removing a stage", "file", file, "err", e)
	}
}
