package stage

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/batching"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("stage: invalid configuration")

// ErrUnknownHandler is wrapped when a configuration names a handler that is
// not registered.
var ErrUnknownHandler = errors.New("unknown handler")

// ConfigError locates a configuration error: the file (if any), and inside
// Err the line and dotted key.
type ConfigError struct {
	File string
	Err  error
}

func (e *ConfigError) Error() string {
	prefix := "config: "
	if e.File != "" {
		prefix = e.File + ": "
	}
	errs := e.Errors()
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = prefix + err.Error()
	}
	return strings.Join(lines, "\n")
}

// Errors returns the located errors one by one, in file order: a file's
// errors are reported all at once, one line each.
func (e *ConfigError) Errors() []error { return yamlstrict.Split(e.Err) }

// Unwrap returns ErrInvalidConfig and the located error.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

// QueueConfig bounds a stage's queue.
type QueueConfig struct {
	// Threshold is the queue's capacity; ≤ 0 (or absent) means unbounded.
	Threshold int `yaml:"threshold"`
	// MaxTime is the queue's age limit: events that waited longer are
	// removed before handling, counted and logged (age.go); 0: none.
	MaxTime time.Duration `yaml:"max_time"`
	// Dispatch, if positive, is the rate (events/s) at which the runtime
	// hands queued events to the handler, with bursts of up to Burst
	// (default 1): JOBS's queueing regulator (age.go).
	Dispatch float64 `yaml:"dispatch"`
	Burst    int     `yaml:"burst"`
}

// ThreadPoolConfig sizes a stage's goroutines.
type ThreadPoolConfig struct {
	Min     int `yaml:"min"`     // 0 → 1
	Max     int `yaml:"max"`     // 0 → 20, or Min if that is larger
	Initial int `yaml:"initial"` // 0 → Min; else within [Min, Max]
	// Weight is the stage's share of a shared pool (0 → 1).
	Weight     int                         `yaml:"weight"`
	Controller threadpool.ControllerConfig `yaml:"controller"`
}

// BatchingConfig sets a stage's batching factor: the most events handed to
// one HandleEvents call.
type BatchingConfig struct {
	Min int `yaml:"min"` // 0 → 1
	Max int `yaml:"max"` // 0 → 1000
	// Controller tunes the factor between Min and Max (thesis §5.4.2). Its
	// own min and max, if given, are overridden by the ones above.
	Controller batching.Config `yaml:"controller"`
}

// batchingConfig merges the bounds into the controller configuration.
func (b BatchingConfig) batchingConfig() batching.Config {
	c := b.Controller
	if b.Min > 0 {
		c.Min = b.Min
	}
	if b.Max > 0 {
		c.Max = b.Max
	}
	return c
}

// StageConfig configures one stage. Its zero value is a usable default: an
// unbounded queue, no predicate, 1 to 20 goroutines (threadpool.DefaultMin
// to DefaultMax, starting at 1) sized by the thread pool's controller,
// which is on with thrashing detection because Max exceeds Min
// (ThreadPool.Min = Max pins the size; a SingleThreaded handler gets one
// goroutine), batches of up to 1000.
//
// Keys of a stage's block that packages above stage own (package remote's
// `remote:`) are sections registered with RegisterStageSection; Section
// returns their decoded values.
type StageConfig struct {
	// Handler is the registry name of the handler (configuration files only).
	Handler string      `yaml:"handler"`
	Queue   QueueConfig `yaml:"queue"`
	// Predicate is the admission predicate for stages created from Go.
	Predicate sink.Predicate `yaml:"-"`
	// PredicateSpec is the `predicate:` block of a configuration file
	// ({type: rate, rate: 5000, ...}; see package enqueuepred), or the
	// global one the stage inherits; nil: none. Predicate, if set, wins.
	PredicateSpec Decoder          `yaml:"-"`
	ThreadPool    ThreadPoolConfig `yaml:"threadpool"`
	Batching      BatchingConfig   `yaml:"batching"`
	// Args is the stage's `args:` block (nil: none), which the handler's
	// Init decodes with Context.DecodeArgs.
	Args Decoder `yaml:"-"`

	// Scheduler orders the queued events (zero: FIFO). In files it is the
	// `scheduler:` key: a type name or a block.
	Scheduler SchedulerConfig `yaml:"-"`
	// Ordering makes events with the same key sequential.
	Ordering OrderingConfig `yaml:"ordering"`
	// Keyed is short for Ordering.Key = "event".
	Keyed bool `yaml:"keyed"`
	// Supervisor, if set, restarts the stage's handler from Factory when
	// it fails; see SupervisorConfig. Nil: failures are contained,
	// counted and reported, and the handler goes on.
	Supervisor *SupervisorConfig `yaml:"supervisor"`
	// Factory makes a fresh handler when a supervisor restarts the stage.
	// Configuration files use the registry's factory.
	Factory Factory `yaml:"-"`
	// Nodes lists the nodes (processes) hosting the stage when one
	// configuration describes a graph spread over several (empty: every
	// node); see Config.Node and HostedOn. How the other nodes reach the
	// stage is the business of the package that connects them.
	Nodes []string `yaml:"nodes"`

	sections    sectionValues // decoded registered stage sections
	path        string        // key path in the configuration file, for errors
	file        string
	handlerLine int
}

// ThreadManagerConfig selects how stages get goroutines.
type ThreadManagerConfig struct {
	// Type is "pool" (default: a pool per stage) or "shared" (one pool for
	// all stages, weighted round robin between them).
	Type string `yaml:"type"`
	// Threads is the shared pool's size (0 → 4).
	Threads int `yaml:"threads"`
}

// GlobalConfig is the `global:` block: defaults for every stage plus the
// settings of the manager's services. The sections packages above stage
// own (the profiler's, aio's, the cluster's) are registered with
// RegisterSection; Section returns their decoded values.
type GlobalConfig struct {
	Queue QueueConfig `yaml:"queue"`
	// Predicate is the default `predicate:` block of every stage (nil:
	// none).
	Predicate     Decoder             `yaml:"-"`
	ThreadPool    ThreadPoolConfig    `yaml:"threadpool"`
	Batching      BatchingConfig      `yaml:"batching"`
	ThreadManager ThreadManagerConfig `yaml:"threadManager"`
	// Shutdown bounds a graceful shutdown by the command that runs the
	// manager (0 → 10s).
	Shutdown time.Duration `yaml:"shutdown"`

	sections sectionValues // decoded registered sections
}

// parseGlobal reads the global: block n into g.
func parseGlobal(g *GlobalConfig, n *yaml.Node, file string) (ok bool, errs []error) {
	skip, secs, errs := splitKeys(n, "global", yamlKeys[GlobalConfig](), []string{"predicate"}, registered.global)
	if err := decodeEach(n, "global", g, skip); err != nil {
		errs = append(errs, err)
	}
	if p := lookup(n, "predicate"); p != nil {
		g.Predicate = newDecoder(p, "global.predicate", file)
	}
	if err := validateGlobal(g, n); err != nil {
		errs = append(errs, err)
	}
	valuesOK := len(errs) == 0
	for i := 0; n != nil && i+1 < len(n.Content); i += 2 {
		name := n.Content[i].Value
		v, ok := secs[name]
		if !ok {
			continue
		}
		val, err := decodeSection(sectionOf(registered.global, name), v, yamlstrict.Join("global", name), file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g.sections.set(name, val)
	}
	return valuesOK, errs
}

// decodeEach decodes mapping n into v like yamlstrict.Decode. When the
// block has errors it still decodes, one by one, the keys that have none,
// so that the checks of the other keys run too: a file's errors are
// reported all at once. The error is the block's, every key's.
func decodeEach(n *yaml.Node, path string, v any, skip []string) error {
	err := yamlstrict.Decode(n, path, v, skip...)
	if err == nil || n == nil || n.Kind != yaml.MappingNode {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if slices.Contains(skip, n.Content[i].Value) {
			continue
		}
		one := *n
		one.Content = n.Content[i : i+2]
		_ = yamlstrict.Decode(&one, path, v) // its error is part of err
	}
	return err
}

// fileDefaults returns the global block's values before the file's: the
// defaults docs/yaml.md lists (the thread-pool controller on, with
// thrashing detection; `enabled: false` turns it off).
func fileDefaults() GlobalConfig {
	var g GlobalConfig
	g.ThreadPool.Controller.Enabled = true
	g.ThreadPool.Controller.AutoMaxDetect = true
	return g
}

// stageDefaults returns a StageConfig holding the global defaults.
func (g GlobalConfig) stageDefaults() StageConfig {
	return StageConfig{Queue: g.Queue, PredicateSpec: g.Predicate, ThreadPool: g.ThreadPool, Batching: g.Batching}
}

// Config is a whole configuration file.
type Config struct {
	File        string // where it was read from, "" for Parse
	Global      GlobalConfig
	Stages      []NamedStageConfig      // in file order
	Supervisors []NamedSupervisorConfig // in dependency order: children first
	// Node is the cluster node this process runs as (package remote sets
	// it): NewFromConfig creates only the stages hosted on it (see
	// StageConfig.HostedOn). "" creates every stage.
	Node string

	// rejected holds the stages that have errors (or all, when the global
	// block has): not built, but their handler, args and predicate are
	// checked at load with the rest of the file (checkLoad).
	rejected []NamedStageConfig
}

// NamedSupervisorConfig is one entry of `supervisors:`, a supervisor group.
type NamedSupervisorConfig struct {
	Name   string
	Config SupervisorConfig
}

// NamedStageConfig is one entry of `stages:`.
type NamedStageConfig struct {
	Name   string
	Config StageConfig
}

// ParseConfig decodes and validates a configuration document. file names it
// in errors ("" for none).
func ParseConfig(data []byte, file string) (*Config, error) {
	cfg, err := parseConfig(data, file)
	if err != nil {
		return nil, &ConfigError{File: file, Err: err}
	}
	return cfg, nil
}

// parseConfig is ParseConfig returning, with the file's errors (file
// order), what it could read of the file for the load-time checks (nil
// when the file is not YAML or not a mapping).
func parseConfig(data []byte, file string) (*Config, error) {
	fail := func(err error) (*Config, error) { return nil, err }
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fail(yamlstrict.SyntaxError(err))
	}
	cfg := &Config{File: file, Global: fileDefaults()}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return cfg, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fail(yamlstrict.Errorf(root, "", "want a mapping with global: and stages:"))
	}
	// Every error of the file is reported at once, in file order.
	var errs []error
	globalOK := true
	var stagesNode, supNode *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "global":
			ok, gerrs := parseGlobal(&cfg.Global, v, file)
			errs, globalOK = append(errs, gerrs...), ok
		case "stages":
			stagesNode = v
		case "supervisors":
			supNode = v
		default:
			errs = append(errs, yamlstrict.UnknownKey(k, k.Value, []string{"global", "stages", "supervisors"}))
		}
	}
	errs = append(errs, yamlBackoffs(stagesNode, supNode)) // `backoff: off` (supervise.go)
	errs = append(errs, parseStages(cfg, stagesNode, file, globalOK))
	errs = append(errs, parseSupervisors(cfg, supNode, stageNames(stagesNode)))
	return cfg, inFileOrder(errs)
}

// stageNames returns the names a `stages:` block defines.
func stageNames(n *yaml.Node) []string {
	var names []string
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			names = append(names, n.Content[i].Value)
		}
	}
	return names
}

// inFileOrder joins errors (yamlstrict errors, possibly joined) sorted by
// line; errors without a line keep their place at the end.
func inFileOrder(errs []error) error {
	joined := yamlstrict.Collect(errs...)
	if joined == nil {
		return nil
	}
	list := yamlstrict.Split(joined)
	line := func(err error) int {
		if ye, ok := errors.AsType[*yamlstrict.Error](err); ok && ye.Line > 0 {
			return ye.Line
		}
		return math.MaxInt
	}
	slices.SortStableFunc(list, func(a, b error) int { return line(a) - line(b) })
	// A block several stages inherit (global.predicate) fails once.
	seen := map[string]bool{}
	list = slices.DeleteFunc(list, func(err error) bool {
		dup := seen[err.Error()]
		seen[err.Error()] = true
		return dup
	})
	return yamlstrict.Collect(list...)
}

// parseStages reads the stages: block, checking every stage. With a bad
// global block (globalOK false) a stage is checked against the file
// defaults, not the global values (each would repeat the global block's
// error), and no stage is built.
func parseStages(cfg *Config, stagesNode *yaml.Node, file string, globalOK bool) error {
	if stagesNode == nil {
		return nil
	}
	if stagesNode.Kind != yaml.MappingNode {
		if stagesNode.Tag == "!!null" {
			return nil
		}
		return yamlstrict.Errorf(stagesNode, "stages", "want a mapping of stage names to stage blocks")
	}
	seen := map[string]int{}
	var errs []error
	for i := 0; i+1 < len(stagesNode.Content); i += 2 {
		k, v := stagesNode.Content[i], stagesNode.Content[i+1]
		name, path := k.Value, yamlstrict.Join("stages", k.Value)
		if name == "" {
			errs = append(errs, yamlstrict.Errorf(k, "stages", "empty stage name"))
			continue
		}
		if line, dup := seen[name]; dup {
			errs = append(errs, yamlstrict.Errorf(k, path, "stage defined twice (first on line %d)", line))
			continue
		}
		seen[name] = k.Line
		// With a bad global block a stage is checked against the
		// defaults instead: each stage would repeat the global error.
		defaults := cfg.Global
		if !globalOK {
			defaults = fileDefaults()
			defaults.Predicate = cfg.Global.Predicate
		}
		sc := defaults.stageDefaults()
		skip, secs, serrs := splitKeys(v, path, yamlKeys[StageConfig](), []string{"args", "predicate", "scheduler"}, registered.stage)
		if err := decodeEach(v, path, &sc, skip); err != nil {
			serrs = append(serrs, err)
		}
		if a := lookup(v, "args"); a != nil {
			sc.Args = newDecoder(a, yamlstrict.Join(path, "args"), file)
		}
		if p := lookup(v, "predicate"); p != nil {
			sc.PredicateSpec = newDecoder(p, yamlstrict.Join(path, "predicate"), file)
		}
		if err := validateStage(&sc, v, path); err != nil {
			serrs = append(serrs, err)
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			key := v.Content[j].Value
			sn, ok := secs[key]
			if !ok {
				continue
			}
			val, err := decodeSection(sectionOf(registered.stage, key), sn, yamlstrict.Join(path, key), file)
			if err != nil {
				serrs = append(serrs, err)
				continue
			}
			sc.sections.set(key, val)
		}
		sc.ThreadPool.Controller.Disabled = !sc.ThreadPool.Controller.Enabled
		if sc.Handler == "" {
			serrs = append(serrs, yamlstrict.Errorf(v, yamlstrict.Join(path, "handler"), "missing: every stage names its handler"))
		}
		sc.path, sc.file = path, file
		if hn := lookup(v, "handler"); hn != nil {
			sc.handlerLine = hn.Line
		}
		errs = append(errs, serrs...)
		if len(serrs) > 0 || !globalOK {
			// Not built, but Load still checks its handler, args and
			// predicate with the rest of the file.
			if sc.Handler != "" {
				cfg.rejected = append(cfg.rejected, NamedStageConfig{Name: name, Config: sc})
			}
			continue
		}
		cfg.Stages = append(cfg.Stages, NamedStageConfig{Name: name, Config: sc})
	}
	return yamlstrict.Collect(errs...)
}

// lookup finds the node at a key path below n (nil if absent).
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	for _, key := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

// check reports a semantic error at the node of a key path, falling back to
// the block's own line when the key came from defaults.
func check(ok bool, block *yaml.Node, path string, keys []string, format string, args ...any) error {
	if ok {
		return nil
	}
	n := lookup(block, keys...)
	if n == nil {
		n = block
	}
	p := path
	for _, k := range keys {
		p = yamlstrict.Join(p, k)
	}
	return yamlstrict.Errorf(n, p, format, args...)
}

func validatePool(tp ThreadPoolConfig, b BatchingConfig, block *yaml.Node, path string) error {
	// The pool would clamp an initial count outside [min, max]: say so
	// instead. An absent max is threadpool.DefaultMax, raised to min.
	effMax, maxNote := tp.Max, ""
	if effMax == 0 {
		effMax, maxNote = max(threadpool.DefaultMax, tp.Min), " (the default)"
	}
	// blame the first of keys the block itself sets: a stage's max below
	// the global min is the stage's max.
	blame := func(keys ...string) []string {
		for _, k := range keys {
			if lookup(block, "threadpool", k) != nil {
				return []string{"threadpool", k}
			}
		}
		return []string{"threadpool", keys[0]}
	}
	// Every sign error is reported; the order checks only without them,
	// and only the first of those (the others are often its consequences).
	signs := yamlstrict.Collect(
		check(tp.Min >= 0, block, path, []string{"threadpool", "min"}, "negative thread count %d", tp.Min),
		check(tp.Max >= 0, block, path, []string{"threadpool", "max"}, "negative thread count %d", tp.Max),
		check(tp.Initial >= 0, block, path, []string{"threadpool", "initial"}, "negative thread count %d", tp.Initial),
		check(tp.Weight >= 0, block, path, []string{"threadpool", "weight"}, "negative weight %d", tp.Weight),
	)
	pool := signs
	if signs == nil {
		pool = firstError([]error{
			check(tp.Max == 0 || tp.Min <= tp.Max, block, path, blame("min", "max"), "min %d is above max %d", tp.Min, tp.Max),
			check(tp.Initial == 0 || tp.Initial <= effMax, block, path, blame("initial", "max"), "initial %d is above max %d%s", tp.Initial, effMax, maxNote),
			check(tp.Initial == 0 || tp.Initial >= tp.Min, block, path, blame("initial", "min"), "initial %d is below min %d", tp.Initial, tp.Min),
		})
	}
	batch := yamlstrict.Collect(
		check(b.Min >= 0, block, path, []string{"batching", "min"}, "negative batch size %d", b.Min),
		check(b.Max >= 0, block, path, []string{"batching", "max"}, "negative batch size %d", b.Max),
	)
	if batch == nil {
		if err := b.batchingConfig().Validate(); err != nil {
			batch = check(false, block, path, []string{"batching"}, "%v", err)
		}
	}
	return yamlstrict.Collect(pool, validateController(tp.Controller, block, path), batch)
}

// Controller keys that only one controller type reads (threadpool).
var (
	sedaKeys      = []string{"queueThreshold", "idle", "autoMaxDetect", "smoothing", "margin", "resetEvery", "maxRandomDrop"}
	whirlwindKeys = []string{"idleTime", "queueLatency", "lockLatency"}
)

// validateController checks a threadpool.controller block: its values
// (located at the key at fault), and that the block sets no key of the
// other controller type, which would be silently ignored. Keys inherited
// from global: are not the stage's to answer for.
func validateController(c threadpool.ControllerConfig, block *yaml.Node, path string) error {
	at := []string{"threadpool", "controller"}
	if err := c.Validate(); err != nil {
		if fe, ok := errors.AsType[*threadpool.FieldError](err); ok {
			return check(false, block, path, append(at, fe.Key), "%s %s", fe.Key, fe.Reason)
		}
		return check(false, block, path, at, "%v", err)
	}
	typ, foreign := threadpool.TypeSEDA, whirlwindKeys
	if c.Type == threadpool.TypeWhirlwind {
		typ, foreign = c.Type, sedaKeys
	}
	for _, k := range foreign {
		if lookup(block, "threadpool", "controller", k) != nil {
			return check(false, block, path, append(at, k), "%s does not apply to controller type %s", k, typ)
		}
	}
	return nil
}

func firstError(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func validateGlobal(g *GlobalConfig, n *yaml.Node) error {
	errs := []error{validatePool(g.ThreadPool, g.Batching, n, "global")}
	switch g.ThreadManager.Type {
	case "", "pool", "shared":
	default:
		errs = append(errs, check(false, n, "global", []string{"threadManager", "type"}, "unknown thread manager %q (known: pool, shared)", g.ThreadManager.Type))
	}
	return yamlstrict.Collect(append(errs,
		check(g.ThreadManager.Threads >= 0, n, "global", []string{"threadManager", "threads"}, "negative thread count %d", g.ThreadManager.Threads),
		check(g.Shutdown >= 0, n, "global", []string{"shutdown"}, "negative duration %v", g.Shutdown),
	)...)
}

// validateStage checks a stage block's values, every one: it returns all
// of their errors.
func validateStage(sc *StageConfig, n *yaml.Node, path string) error {
	errs := []error{validatePool(sc.ThreadPool, sc.Batching, n, path), validateNodes(sc, n, path)}
	spec := lookup(n, "scheduler")
	sched, err := decodeScheduler(spec, yamlstrict.Join(path, "scheduler"))
	if err != nil {
		errs = append(errs, err)
	} else {
		sc.Scheduler = sched
		if p := checkScheduler(sc.Scheduler); p != nil {
			if spec != nil && spec.Kind == yaml.MappingNode && len(p.keys) == 1 {
				p.keys = append(p.keys, "type")
			}
			errs = append(errs, p.at(n, path))
		}
	}
	if p := checkOrdering(sc); p != nil {
		errs = append(errs, p.at(n, path))
	}
	if p := checkMaxTime(sc.Queue); p != nil {
		errs = append(errs, p.at(n, path))
	}
	if sc.Supervisor != nil {
		if p := checkSupervisor(*sc.Supervisor, false); p != nil {
			p.keys = append([]string{"supervisor"}, p.keys...)
			errs = append(errs, p.at(n, path))
		}
	}
	return yamlstrict.Collect(errs...)
}

// validateGo checks a StageConfig built in Go.
func (sc *StageConfig) validateGo() error {
	if err := validatePool(sc.ThreadPool, sc.Batching, nil, sc.path); err != nil {
		var ye *yamlstrict.Error
		if errors.As(err, &ye) {
			return fmt.Errorf("%w: %s", ErrInvalidConfig, ye.Msg)
		}
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if p := checkScheduler(sc.Scheduler); p != nil {
		return p.inGo()
	}
	if p := checkOrdering(sc); p != nil {
		return p.inGo()
	}
	if p := checkMaxTime(sc.Queue); p != nil {
		return p.inGo()
	}
	if sc.Supervisor != nil {
		if p := checkSupervisor(*sc.Supervisor, false); p != nil {
			p.keys = append([]string{"supervisor"}, p.keys...)
			return p.inGo()
		}
	}
	return nil
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stage: load config: %w", err)
	}
	return ParseConfig(data, path)
}

// Load reads a configuration file and builds a manager (not started) with
// its stages, taking handlers from r (nil: DefaultRegistry). opts, at most
// one (the last wins), are NewManager's: logger, failure hook, clock,
// metrics registry. What the file's global block configures happens
// without further wiring: the services of linked-in packages (the
// profiler, its log and dashboard: see RegisterService) start and stop
// with the manager, and Shutdown is bounded by global.shutdown
// (ShutdownBound; Run waits for a signal and shuts down within it).
//
// A file's errors are reported all at once, in file order: those of
// ParseConfig and those NewFromConfig finds with the registry.
func Load(path string, r *Registry, opts ...Options) (*Manager, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stage: load config: %w", err)
	}
	return parseAndLoad(data, path, r, opts)
}

// Parse is Load for a configuration held in memory.
func Parse(data []byte, r *Registry, opts ...Options) (*Manager, error) {
	return parseAndLoad(data, "", r, opts)
}

func parseAndLoad(data []byte, file string, r *Registry, opts []Options) (*Manager, error) {
	cfg, err := parseConfig(data, file)
	if cfg == nil {
		return nil, &ConfigError{File: file, Err: err}
	}
	return newLoaded(cfg, r, opts, err)
}

// NewFromConfig builds a manager (not started) from a parsed configuration.
// Options set in o win over the file's global block where both say something.
//
// Every error of the configuration is reported at once, in file order, in
// one *ConfigError: unknown handlers, stage names in args that name no
// stage, args that do not decode into the type the handler declares (see
// Registry.DeclareArgs) and predicate blocks that do not build.
func NewFromConfig(cfg *Config, r *Registry, o Options) (*Manager, error) {
	return newFromConfig(cfg, r, o, nil)
}

// newFromConfig is NewFromConfig reporting parseErr, ParseConfig's errors
// for cfg, with its own.
func newFromConfig(cfg *Config, r *Registry, o Options, parseErr error) (*Manager, error) {
	if r == nil {
		r = DefaultRegistry
	}
	if err := checkLoad(cfg, r, parseErr); err != nil {
		return nil, err
	}
	if o.ThreadManager.Type == "" {
		o.ThreadManager = cfg.Global.ThreadManager
	}
	o.Registry = r
	m := NewManager(o)
	m.config.Store(cfg)
	if err := declareGroups(m, cfg); err != nil {
		return nil, err
	}
	for _, ns := range cfg.Stages {
		if !ns.Config.HostedOn(cfg.Node) {
			continue
		}
		f, _ := r.Lookup(ns.Config.Handler) // checkLoad saw to it
		sc := ns.Config
		sc.Factory = f
		if _, err := m.CreateStage(ns.Name, f(), sc); err != nil {
			return nil, err
		}
	}
	for _, g := range cfg.Supervisors {
		if err := m.Supervise(g.Name, g.Config); err != nil {
			return nil, &ConfigError{File: cfg.File, Err: err}
		}
	}
	return m, nil
}

// declareGroups creates the group rates the configuration's predicate
// blocks give before any stage is built, so that a stage's group block may
// omit the rate whether the stage giving it comes before or after it.
func declareGroups(m *Manager, cfg *Config) error {
	for _, ns := range cfg.Stages {
		sc := &ns.Config
		if sc.Predicate != nil || !present(sc.PredicateSpec) {
			continue
		}
		env := enqueuepred.Env{Stage: ns.Name, Shared: m.predicateShared()}
		if err := enqueuepred.DeclareGroups(sc.PredicateSpec, env); err != nil {
			return &ConfigError{File: cfg.File, Err: err}
		}
	}
	return nil
}

// yamlKeys returns the keys of T's yaml block, in field order: messages
// that list them stay in step with the struct.
func yamlKeys[T any]() []string {
	t := reflect.TypeFor[T]()
	var keys []string
	for i := range t.NumField() {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if key != "" && key != "-" {
			keys = append(keys, key)
		}
	}
	return keys
}

// parseSupervisors reads the top-level `supervisors:` block: groups over
// stages and other groups. Every name must resolve, every child has one
// parent, and groups form a forest.
func parseSupervisors(cfg *Config, n *yaml.Node, stageNames []string) error {
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return yamlstrict.Errorf(n, "supervisors", "want a mapping of supervisor names to {%s}", strings.Join(yamlKeys[SupervisorConfig](), ", "))
	}
	stages := map[string]bool{} // every stage the file defines, valid or not
	for _, s := range stageNames {
		stages[s] = true
	}
	type group struct {
		name string
		cfg  SupervisorConfig
		key  *yaml.Node
	}
	var groups []group
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name, path := k.Value, yamlstrict.Join("supervisors", k.Value)
		switch {
		case name == "":
			return yamlstrict.Errorf(k, "supervisors", "empty supervisor name")
		case stages[name]:
			return yamlstrict.Errorf(k, path, "a stage has that name; children name stages and supervisors alike")
		case lines[name] != 0:
			return yamlstrict.Errorf(k, path, "supervisor defined twice (first on line %d)", lines[name])
		}
		lines[name] = k.Line
		var sc SupervisorConfig
		if err := yamlstrict.Decode(v, path, &sc); err != nil {
			return err
		}
		if p := checkSupervisor(sc, true); p != nil {
			return p.at(v, path)
		}
		groups = append(groups, group{name: name, cfg: sc, key: k})
	}
	// resolve children and parents
	parent := map[string]string{}
	for _, g := range groups {
		path := yamlstrict.Join(yamlstrict.Join("supervisors", g.name), "children")
		list := lookup(n, g.name, "children")
		for i, c := range g.cfg.Children {
			at := list
			if list != nil && i < len(list.Content) {
				at = list.Content[i]
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			if !stages[c] && lines[c] == 0 {
				known := append(slices.Clone(stageNames), slices.Collect(maps.Keys(lines))...)
				if s := yamlstrict.Suggest(c, known); s != "" {
					return yamlstrict.Errorf(at, p, "no stage or supervisor %q (did you mean %q?)", c, s)
				}
				return yamlstrict.Errorf(at, p, "no stage or supervisor %q", c)
			}
			if c == g.name {
				return yamlstrict.Errorf(at, p, "a supervisor cannot supervise itself")
			}
			if prev, ok := parent[c]; ok {
				return yamlstrict.Errorf(at, p, "%q is already supervised by %q", c, prev)
			}
			parent[c] = g.name
		}
	}
	// a group reachable from itself through parents is a cycle
	for _, g := range groups {
		seen := map[string]bool{g.name: true}
		for p, ok := parent[g.name]; ok; p, ok = parent[p] {
			if seen[p] {
				return yamlstrict.Errorf(g.key, yamlstrict.Join("supervisors", g.name), "supervisors form a cycle through %q", p)
			}
			seen[p] = true
		}
	}
	// children first, otherwise in file order
	done := map[string]bool{}
	for len(cfg.Supervisors) < len(groups) {
		for _, g := range groups {
			if done[g.name] {
				continue
			}
			ready := true
			for _, c := range g.cfg.Children {
				if lines[c] != 0 && !done[c] {
					ready = false
				}
			}
			if ready {
				done[g.name] = true
				cfg.Supervisors = append(cfg.Supervisors, NamedSupervisorConfig{Name: g.name, Config: g.cfg})
			}
		}
	}
	return nil
}
