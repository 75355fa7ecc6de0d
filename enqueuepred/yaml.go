package enqueuepred

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Env is what FromSpec needs from the stage runtime.
type Env struct {
	Stage  string           // the stage the predicate guards (for messages)
	Now    func() time.Time // nil: time.Now
	Logger *slog.Logger     // nil: discard
	// Lookup finds another stage's sink (queue and response-time samplers).
	Lookup func(stage string) (sink.Sink, bool)
	// ResponseTime, if set, reports the runtime's own measurement of a
	// stage's response time for response-time samplers.
	ResponseTime func(stage string) (time.Duration, bool)
	// Shared holds per-manager state such as group rates; group predicates
	// need it.
	Shared *Shared
}

func (env Env) logger() *slog.Logger {
	l := env.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	if env.Stage != "" {
		l = l.With("stage", env.Stage)
	}
	return l
}

type builder func(n *yaml.Node, path string, env Env) (sink.Predicate, error)

var builders map[string]builder

func init() {
	builders = map[string]builder{
		"threshold":  buildLimited("threshold", 0, func(limit int) scalable { return newThreshold(limit) }),
		"rate":       buildRate,
		"rt":         buildRT,
		"multiclass": buildMulticlass,
		"counter":    buildLimited("counter", 1, func(limit int) scalable { return newCounter(limit) }),
		"vegas":      buildLimit("vegas"),
		"account":    buildAccount,
		"saturated":  buildSaturated,
		"gradient":   buildLimit("gradient"),
		"cost":       buildCost,
		"red":        buildRED,
		"codel":      buildSojourn,
		"sojourn":    buildSojourn,
		"group":      buildGroup,
		"session":    buildSession,
		"priority":   buildPriority,
		"all":        buildAll,
		"any":        buildAny,
	}
}

// Types returns the predicate types FromSpec knows, sorted.
func Types() []string {
	out := make([]string, 0, len(builders))
	for k := range builders {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Spec is a predicate block of a configuration file, such as
// `{type: rate, rate: 5000, depth: 100}`: package stage's Decoder for the
// block (stage.StageConfig.PredicateSpec) is one. Decode decodes the block
// into a value of this package's own choosing (its decoding reads the
// block's structure and lines, so it needs a decoder of YAML); Path is the
// block's dotted key path.
type Spec interface {
	Decode(v any) error
	Path() string
}

// specNode returns the YAML node of spec.
func specNode(spec Spec) (*yaml.Node, error) {
	var n yaml.Node
	if err := spec.Decode(&n); err != nil {
		return nil, err
	}
	if n.Kind == 0 {
		return nil, nil
	}
	return &n, nil
}

// FromSpec builds a predicate from a configuration block. Errors name the
// block's line and dotted key path (and wrap yamlstrict.ErrInvalid, as
// stage.ErrInvalidConfig does). Known types:
//
//	threshold  {limit: N, modifiers: [...]}
//	rate       {rate: R, depth: D, shards: N, modifiers: [...]}
//	           (shards > 1: spread over N sub-buckets for many cores)
//	rt         {target: 500ms, mode: fast|thesis, nreq, timeout, interval, alpha,
//	            errInc, errDec, adjInc, adjDec, cInc, rateMin, rateMax,
//	            initialRate, depth, headroom, enabled}
//	multiclass {targets: {0: 2s, 1: 500ms}, adjLow, lowCount, + the rt knobs}
//	counter    {limit: N, modifiers: [...]}
//	vegas      {initial: 20, min: 1, max: 1000}  (adaptive concurrency limit)
//	gradient   {initial, min, max, tolerance: 1.5, smoothing: 0.2, window: 100ms}
//	cost       {limit: L}  (outstanding cost; see Costed, CostConfig)
//	red        {min, max, maxp, weight, gentle}
//	codel      {target: 5ms, interval: 100ms, shed: false}   (alias: sojourn;
//	           shed: also drop queued events at dequeue, CoDel's control law)
//	group      {group: NAME, rate: R, depth: D} (shared through Env.Shared;
//	            "name" is an alias of "group"; blocks built after the one
//	            giving the rate may omit it: see DeclareGroups)
//	session    {window: 10s, maxSessions: N, table: NAME, of: {nested block}}
//	           (table: stages naming the same table share their sessions'
//	           decisions, so a session is treated the same in each)
//	priority   {limits: {0: 100, 1: 1000}}
//	saturated  {of: {nested block}, threads: N}  (admission control only once
//	           the stage's own pool cannot grow and no worker is idle; threads,
//	           optional, only where there is no such pool: once N events
//	           are in service)
//	account    {max: 100, of: {nested block}}  (per-principal accounting;
//	           of may be omitted: admit everything)
//	all, any   {of: [{nested block}, ...]}
//
// A modifier is {sampler: cpu|heap|goroutines|queue|rt|arrivals|service|wait, stage: NAME,
// interval: 1s, factor: 10, value: {80: 1, 90: 2}} or, by duration,
// {..., over: 90, duration: {0s: 1, 30s: 2}}. Sampler units: cpu percent,
// heap MiB, goroutines count, queue events, rt milliseconds; arrivals
// (events/s), service and wait (mean ms) are fed by the guarded stage's
// own events (see Sampler, NewSampler).
func FromSpec(spec Spec, env Env) (sink.Predicate, error) {
	n, err := specNode(spec)
	if err != nil {
		return nil, err
	}
	return fromYAML(n, spec.Path(), env)
}

// fromYAML builds the predicate of block n at path.
func fromYAML(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	if n == nil {
		return nil, yamlstrict.Errorf(nil, path, "missing predicate block")
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return nil, yamlstrict.Errorf(n, path, "want a predicate mapping such as {type: threshold, limit: 1000}")
	}
	var typeNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "type" {
			typeNode = n.Content[i+1]
		}
	}
	known := strings.Join(Types(), ", ")
	if typeNode == nil {
		return nil, yamlstrict.Errorf(n, yamlstrict.Join(path, "type"), "missing predicate type (known: %s)", known)
	}
	b, ok := builders[typeNode.Value]
	if !ok || typeNode.Kind != yaml.ScalarNode {
		return nil, yamlstrict.Errorf(typeNode, yamlstrict.Join(path, "type"), "unknown predicate type %q (known: %s)", typeNode.Value, known)
	}
	return b(n, path, env)
}

func decode(n *yaml.Node, path string, v any) error {
	return yamlstrict.Decode(n, path, v, "type")
}

// child returns the value node of key in mapping n, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// at returns the node to blame for key: its value, or n itself.
func at(n *yaml.Node, key string) *yaml.Node {
	if c := child(n, key); c != nil {
		return c
	}
	return n
}

type regulatorYAML struct {
	Modifiers []yaml.Node `yaml:"modifiers"`
}

// buildLimited returns the builder of type kind: a predicate made by
// newPred from a limit of at least least, with modifiers.
func buildLimited(kind string, least int, newPred func(limit int) scalable) builder {
	return func(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
		var c struct {
			Limit *int          `yaml:"limit"`
			Reg   regulatorYAML `yaml:",inline"`
		}
		if err := decode(n, path, &c); err != nil {
			return nil, err
		}
		if c.Limit == nil {
			return nil, yamlstrict.Errorf(n, yamlstrict.Join(path, "limit"), "%s needs a limit", kind)
		}
		if *c.Limit < least {
			return nil, yamlstrict.Errorf(at(n, "limit"), yamlstrict.Join(path, "limit"), "limit must be >= %d, got %d", least, *c.Limit)
		}
		return withModifiers(newPred(*c.Limit), c.Reg.Modifiers, n, path, env)
	}
}

func buildLimit(alg string) builder {
	return func(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
		var c struct {
			Initial   int           `yaml:"initial"`
			Min       int           `yaml:"min"`
			Max       int           `yaml:"max"`
			Tolerance float64       `yaml:"tolerance"`
			Smoothing float64       `yaml:"smoothing"`
			Window    time.Duration `yaml:"window"`
		}
		if err := decode(n, path, &c); err != nil {
			return nil, err
		}
		if alg == "vegas" {
			for _, k := range []string{"tolerance", "smoothing", "window"} {
				if child(n, k) != nil {
					return nil, yamlstrict.Errorf(at(n, k), yamlstrict.Join(path, k), "%s applies to type gradient, not vegas", k)
				}
			}
		}
		l, err := NewLimit(LimitConfig{Algorithm: alg, Initial: c.Initial, Min: c.Min, Max: c.Max,
			Tolerance: c.Tolerance, Smoothing: c.Smoothing, Window: c.Window, Now: env.Now})
		if err != nil {
			return nil, yamlstrict.Errorf(n, path, "%v", err)
		}
		return l, nil
	}
}

type rateYAML struct {
	Rate  *float64 `yaml:"rate"`
	Depth int      `yaml:"depth"`
}

func (c rateYAML) check(n *yaml.Node, path string) error {
	if c.Rate == nil {
		return yamlstrict.Errorf(n, yamlstrict.Join(path, "rate"), "missing rate (events per second)")
	}
	if !(*c.Rate > 0) {
		return yamlstrict.Errorf(at(n, "rate"), yamlstrict.Join(path, "rate"), "rate must be positive, got %v", *c.Rate)
	}
	if c.Depth < 0 {
		return yamlstrict.Errorf(at(n, "depth"), yamlstrict.Join(path, "depth"), "depth must be >= 0, got %d", c.Depth)
	}
	return nil
}

func buildRate(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		R      rateYAML      `yaml:",inline"`
		Shards int           `yaml:"shards"`
		Reg    regulatorYAML `yaml:",inline"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if err := c.R.check(n, path); err != nil {
		return nil, err
	}
	if c.Shards < 0 {
		return nil, yamlstrict.Errorf(at(n, "shards"), yamlstrict.Join(path, "shards"), "shards must be >= 0, got %d", c.Shards)
	}
	r := NewRate(RateConfig{Rate: *c.R.Rate, Depth: c.R.Depth, Shards: c.Shards, Now: env.Now})
	return withModifiers(r, c.Reg.Modifiers, n, path, env)
}

// groupYAML is a group block: {group: NAME, rate: R, depth: D}.
type groupYAML struct {
	Group string   `yaml:"group"`
	Name  string   `yaml:"name"` // alias of group
	R     rateYAML `yaml:",inline"`
}

// decodeGroup decodes and checks group block n; the rate may be absent.
func decodeGroup(n *yaml.Node, path string, env Env) (groupYAML, error) {
	var c groupYAML
	if err := decode(n, path, &c); err != nil {
		return c, err
	}
	switch {
	case c.Group != "" && c.Name != "" && c.Group != c.Name:
		return c, yamlstrict.Errorf(at(n, "name"), yamlstrict.Join(path, "name"), "name %q and group %q disagree (they are aliases)", c.Name, c.Group)
	case c.Group == "":
		c.Group = c.Name
	}
	if c.Group == "" {
		return c, yamlstrict.Errorf(n, yamlstrict.Join(path, "group"), "group predicate needs a group name")
	}
	if env.Shared == nil {
		return c, yamlstrict.Errorf(n, path, "group predicates need shared manager state (Env.Shared)")
	}
	if c.R.Rate != nil {
		if err := c.R.check(n, path); err != nil {
			return c, err
		}
	}
	return c, nil
}

// group returns the group rate of c from env.Shared, creating it if c gives
// a rate.
func (c groupYAML) group(n *yaml.Node, path string, env Env) (*GroupRate, error) {
	cfg := RateConfig{Depth: c.R.Depth, Now: env.Now}
	if c.R.Rate != nil {
		cfg.Rate = *c.R.Rate
	} else if !slices.Contains(env.Shared.Groups(), c.Group) {
		return nil, yamlstrict.Errorf(n, yamlstrict.Join(path, "rate"), "group %q has no rate: give it here or in another block naming the group", c.Group)
	}
	g, err := env.Shared.Group(c.Group, cfg)
	if err != nil {
		return nil, yamlstrict.Errorf(n, path, "%v", err)
	}
	return g, nil
}

func buildGroup(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	c, err := decodeGroup(n, path, env)
	if err != nil {
		return nil, err
	}
	return c.group(n, path, env)
}

// DeclareGroups creates in env.Shared the group rates that predicate block
// spec (as given to FromSpec) gives a rate, including
// group blocks nested in all, any and session. A runtime calls it on every
// block of a configuration before building any predicate, so that a group
// block without a rate may come before, or after, the block that sets the
// group's rate: file order does not matter. Blocks of other types are left
// for FromSpec to check; a malformed group block is an error located as
// FromSpec's would be.
func DeclareGroups(spec Spec, env Env) error {
	n, err := specNode(spec)
	if err != nil {
		return err
	}
	return declareGroups(n, spec.Path(), env)
}

func declareGroups(n *yaml.Node, path string, env Env) error {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	typ := child(n, "type")
	if typ == nil || typ.Kind != yaml.ScalarNode {
		return nil
	}
	switch typ.Value {
	case "group":
		c, err := decodeGroup(n, path, env)
		if err != nil || c.R.Rate == nil {
			return err
		}
		_, err = c.group(n, path, env)
		return err
	case "session":
		return declareGroups(child(n, "of"), yamlstrict.Join(path, "of"), env)
	case "all", "any":
		of := child(n, "of")
		if of == nil || of.Kind != yaml.SequenceNode {
			return nil
		}
		for i, cn := range of.Content {
			if err := declareGroups(cn, fmt.Sprintf("%s[%d]", yamlstrict.Join(path, "of"), i), env); err != nil {
				return err
			}
		}
	}
	return nil
}

type rtYAML struct {
	Mode        string        `yaml:"mode"`
	NReq        int           `yaml:"nreq"`
	Timeout     time.Duration `yaml:"timeout"`
	Interval    time.Duration `yaml:"interval"`
	Alpha       float64       `yaml:"alpha"`
	ErrInc      float64       `yaml:"errInc"`
	ErrDec      float64       `yaml:"errDec"`
	AdjInc      float64       `yaml:"adjInc"`
	AdjDec      float64       `yaml:"adjDec"`
	CInc        float64       `yaml:"cInc"`
	RateMin     float64       `yaml:"rateMin"`
	RateMax     float64       `yaml:"rateMax"`
	InitialRate float64       `yaml:"initialRate"`
	Depth       int           `yaml:"depth"`
	Headroom    float64       `yaml:"headroom"`
	Enabled     *bool         `yaml:"enabled"`
}

func (c rtYAML) config(n *yaml.Node, path string, env Env) (RTConfig, error) {
	if _, err := parseMode(c.Mode); err != nil {
		return RTConfig{}, yamlstrict.Errorf(at(n, "mode"), yamlstrict.Join(path, "mode"), "%v", err)
	}
	for _, f := range []struct {
		key string
		bad bool
	}{
		{"nreq", c.NReq < 0}, {"timeout", c.Timeout < 0}, {"interval", c.Interval < 0},
		{"depth", c.Depth < 0}, {"rateMin", c.RateMin < 0}, {"rateMax", c.RateMax < 0},
		{"initialRate", c.InitialRate < 0},
	} {
		if f.bad {
			return RTConfig{}, yamlstrict.Errorf(at(n, f.key), yamlstrict.Join(path, f.key), "must not be negative")
		}
	}
	return RTConfig{
		Mode: c.Mode, NReq: c.NReq, Timeout: c.Timeout, Interval: c.Interval,
		Alpha: c.Alpha, ErrInc: c.ErrInc, ErrDec: c.ErrDec, AdjInc: c.AdjInc, AdjDec: c.AdjDec,
		CInc: c.CInc, RateMin: c.RateMin, RateMax: c.RateMax, InitialRate: c.InitialRate,
		Depth: c.Depth, Headroom: c.Headroom, Disabled: c.Enabled != nil && !*c.Enabled,
		Now: env.Now, Logger: env.logger(),
	}, nil
}

func buildRT(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		Target time.Duration `yaml:"target"`
		RT     rtYAML        `yaml:",inline"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if c.Target <= 0 {
		return nil, yamlstrict.Errorf(at(n, "target"), yamlstrict.Join(path, "target"), "rt needs a positive 90th-percentile target such as 500ms")
	}
	cfg, err := c.RT.config(n, path, env)
	if err != nil {
		return nil, err
	}
	cfg.Target = c.Target
	r, err := NewResponseTime(cfg)
	if err != nil {
		return nil, yamlstrict.Errorf(n, path, "%v", err)
	}
	return r, nil
}

func buildMulticlass(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		Targets  map[int]time.Duration `yaml:"targets"`
		AdjLow   float64               `yaml:"adjLow"`
		LowCount int                   `yaml:"lowCount"`
		RT       rtYAML                `yaml:",inline"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	tp := yamlstrict.Join(path, "targets")
	if len(c.Targets) == 0 {
		return nil, yamlstrict.Errorf(at(n, "targets"), tp, "multiclass needs targets per class, e.g. {0: 2s, 1: 500ms}")
	}
	for class, d := range c.Targets {
		if d <= 0 {
			return nil, yamlstrict.Errorf(at(n, "targets"), yamlstrict.Join(tp, strconv.Itoa(class)), "target must be positive, got %v", d)
		}
	}
	if c.AdjLow != 0 && c.AdjLow < 1 {
		return nil, yamlstrict.Errorf(at(n, "adjLow"), yamlstrict.Join(path, "adjLow"), "adjLow must be >= 1, got %v", c.AdjLow)
	}
	if c.LowCount < 0 {
		return nil, yamlstrict.Errorf(at(n, "lowCount"), yamlstrict.Join(path, "lowCount"), "lowCount must not be negative")
	}
	rt, err := c.RT.config(n, path, env)
	if err != nil {
		return nil, err
	}
	m, err := newMulticlass(MulticlassConfig{Targets: c.Targets, RT: rt, AdjLow: c.AdjLow, LowCount: c.LowCount})
	if err != nil {
		return nil, yamlstrict.Errorf(n, path, "%v", err)
	}
	return m, nil
}

func buildRED(n *yaml.Node, path string, _ Env) (sink.Predicate, error) {
	var c struct {
		Min    float64 `yaml:"min"`
		Max    float64 `yaml:"max"`
		MaxP   float64 `yaml:"maxp"`
		Weight float64 `yaml:"weight"`
		Gentle bool    `yaml:"gentle"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	switch {
	case c.Min < 0:
		return nil, yamlstrict.Errorf(at(n, "min"), yamlstrict.Join(path, "min"), "must not be negative")
	case c.Max != 0 && c.Max <= c.Min:
		return nil, yamlstrict.Errorf(at(n, "max"), yamlstrict.Join(path, "max"), "max (%v) must be above min (%v)", c.Max, c.Min)
	case c.MaxP < 0 || c.MaxP > 1:
		return nil, yamlstrict.Errorf(at(n, "maxp"), yamlstrict.Join(path, "maxp"), "maxp must be in (0,1], got %v", c.MaxP)
	case c.Weight < 0 || c.Weight > 1:
		return nil, yamlstrict.Errorf(at(n, "weight"), yamlstrict.Join(path, "weight"), "weight must be in (0,1], got %v", c.Weight)
	}
	return newRED(REDConfig{Min: c.Min, Max: c.Max, MaxP: c.MaxP, Weight: c.Weight, Gentle: c.Gentle}), nil
}

func buildSojourn(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		Target   time.Duration `yaml:"target"`
		Interval time.Duration `yaml:"interval"`
		Shed     bool          `yaml:"shed"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if c.Target < 0 || c.Interval < 0 {
		return nil, yamlstrict.Errorf(n, path, "target and interval must not be negative")
	}
	return newSojourn(SojournConfig{Target: c.Target, Interval: c.Interval, Shed: c.Shed, Now: env.Now}), nil
}

func buildSession(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		Window      time.Duration `yaml:"window"`
		MaxSessions int           `yaml:"maxSessions"`
		Table       string        `yaml:"table"`
		Of          *yaml.Node    `yaml:"of"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if c.Window < 0 || c.MaxSessions < 0 {
		return nil, yamlstrict.Errorf(n, path, "window and maxSessions must not be negative")
	}
	var table *SessionTable
	if c.Table != "" {
		if env.Shared == nil {
			return nil, yamlstrict.Errorf(at(n, "table"), yamlstrict.Join(path, "table"), "a shared session table needs shared manager state (Env.Shared)")
		}
		t, err := env.Shared.SessionTable(c.Table, c.Window, c.MaxSessions)
		if err != nil {
			return nil, yamlstrict.Errorf(at(n, "table"), yamlstrict.Join(path, "table"), "%v", err)
		}
		table = t
	}
	if c.Of == nil {
		return nil, yamlstrict.Errorf(n, yamlstrict.Join(path, "of"), "session needs the predicate deciding each new session, e.g. of: {type: rt, target: 1s}")
	}
	inner, err := fromYAML(child(n, "of"), yamlstrict.Join(path, "of"), env)
	if err != nil {
		return nil, err
	}
	return newSession(inner, SessionConfig{Window: c.Window, MaxSessions: c.MaxSessions, Now: env.Now, Table: table}), nil
}

func buildAccount(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		Max int        `yaml:"max"`
		Of  *yaml.Node `yaml:"of"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if c.Max < 0 {
		return nil, yamlstrict.Errorf(at(n, "max"), yamlstrict.Join(path, "max"), "must not be negative")
	}
	var inner sink.Predicate
	if c.Of != nil {
		p, err := fromYAML(child(n, "of"), yamlstrict.Join(path, "of"), env)
		if err != nil {
			return nil, err
		}
		inner = p
	}
	return newAccounting(inner, AccountingConfig{Max: c.Max}), nil
}

func buildSaturated(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	var c struct {
		Threads int        `yaml:"threads"`
		Of      *yaml.Node `yaml:"of"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if c.Threads < 0 {
		return nil, yamlstrict.Errorf(at(n, "threads"), yamlstrict.Join(path, "threads"), "saturated needs threads >= 0 (0 or none: follow the stage's own thread pool)")
	}
	if c.Of == nil {
		return nil, yamlstrict.Errorf(n, yamlstrict.Join(path, "of"), "saturated needs the predicate applied once the pool is full, e.g. of: {type: rt, target: 1s}")
	}
	inner, err := fromYAML(child(n, "of"), yamlstrict.Join(path, "of"), env)
	if err != nil {
		return nil, err
	}
	return newSaturated(inner, c.Threads), nil
}

func buildPriority(n *yaml.Node, path string, _ Env) (sink.Predicate, error) {
	var c struct {
		Limits map[int]int `yaml:"limits"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	if len(c.Limits) == 0 {
		return nil, yamlstrict.Errorf(at(n, "limits"), yamlstrict.Join(path, "limits"), "priority needs queue-length limits per priority, e.g. {0: 100, 1: 1000}")
	}
	for lvl, l := range c.Limits {
		if l < 0 {
			return nil, yamlstrict.Errorf(at(n, "limits"), yamlstrict.Join(path, "limits."+strconv.Itoa(lvl)), "limit must not be negative")
		}
	}
	return newPriority(c.Limits)
}

func buildChildren(n *yaml.Node, path string, env Env) ([]sink.Predicate, error) {
	var c struct {
		Of []yaml.Node `yaml:"of"`
	}
	if err := decode(n, path, &c); err != nil {
		return nil, err
	}
	of := child(n, "of")
	if of == nil || len(of.Content) == 0 {
		return nil, yamlstrict.Errorf(at(n, "of"), yamlstrict.Join(path, "of"), "want a non-empty list of predicate blocks")
	}
	ps := make([]sink.Predicate, 0, len(of.Content))
	for i, cn := range of.Content {
		p, err := fromYAML(cn, fmt.Sprintf("%s[%d]", yamlstrict.Join(path, "of"), i), env)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func buildAll(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	ps, err := buildChildren(n, path, env)
	if err != nil {
		return nil, err
	}
	return newAll(ps...), nil
}

func buildAny(n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	ps, err := buildChildren(n, path, env)
	if err != nil {
		return nil, err
	}
	return newAny(ps...), nil
}

type modifierYAML struct {
	Sampler  string        `yaml:"sampler"`
	Stage    string        `yaml:"stage"`
	Interval time.Duration `yaml:"interval"`
	Factor   float64       `yaml:"factor"`
	Value    yaml.Node     `yaml:"value"`
	Over     *float64      `yaml:"over"`
	Duration yaml.Node     `yaml:"duration"`
}

func withModifiers(p scalable, mods []yaml.Node, n *yaml.Node, path string, env Env) (sink.Predicate, error) {
	if len(mods) == 0 {
		return p, nil
	}
	list := child(n, "modifiers")
	cfg := ModifiedConfig{Now: env.Now, Logger: env.logger()}
	for i, mn := range list.Content {
		mp := fmt.Sprintf("%s[%d]", yamlstrict.Join(path, "modifiers"), i)
		m, err := modifierFromYAML(mn, mp, env)
		if err != nil {
			return nil, err
		}
		cfg.Modifiers = append(cfg.Modifiers, m)
	}
	mod, err := newModified(p, cfg)
	if err != nil {
		return nil, yamlstrict.Errorf(list, yamlstrict.Join(path, "modifiers"), "%v", err)
	}
	return mod, nil
}

func modifierFromYAML(n *yaml.Node, path string, env Env) (Modifier, error) {
	var c modifierYAML
	if err := yamlstrict.Decode(n, path, &c); err != nil {
		return Modifier{}, err
	}
	m := Modifier{Interval: c.Interval, Factor: c.Factor}
	if c.Interval < 0 {
		return m, yamlstrict.Errorf(at(n, "interval"), yamlstrict.Join(path, "interval"), "must not be negative")
	}
	if c.Factor < 0 {
		return m, yamlstrict.Errorf(at(n, "factor"), yamlstrict.Join(path, "factor"), "must not be negative")
	}
	needStage := func() error {
		if c.Stage == "" {
			return yamlstrict.Errorf(n, yamlstrict.Join(path, "stage"), "sampler %q needs a stage", c.Sampler)
		}
		return nil
	}
	switch c.Sampler {
	case "queue", "rt":
		if err := needStage(); err != nil {
			return m, err
		}
	case "cpu", "heap", "goroutines", "arrivals", "service", "wait":
	default:
		return m, yamlstrict.Errorf(at(n, "sampler"), yamlstrict.Join(path, "sampler"), "unknown sampler %q (known: %s)", c.Sampler, samplerKinds)
	}
	if c.Stage != "" && c.Sampler != "queue" && c.Sampler != "rt" {
		return m, yamlstrict.Errorf(at(n, "stage"), yamlstrict.Join(path, "stage"), "sampler %q takes no stage", c.Sampler)
	}
	m.Sampler = newSampler(c.Sampler, c.Stage, env)
	hasValue, hasDuration := c.Value.Kind != 0, c.Duration.Kind != 0
	switch {
	case hasValue && hasDuration, !hasValue && !hasDuration:
		return m, yamlstrict.Errorf(n, path, "a modifier needs either value: {threshold: degree, ...} or over: X with duration: {0s: degree, ...}")
	case hasValue:
		if c.Over != nil {
			return m, yamlstrict.Errorf(at(n, "over"), yamlstrict.Join(path, "over"), "over goes with duration templates")
		}
		vn, vp := child(n, "value"), yamlstrict.Join(path, "value")
		if vn.Kind != yaml.MappingNode || len(vn.Content) == 0 {
			return m, yamlstrict.Errorf(vn, vp, "want a non-empty mapping {threshold: degree, ...}")
		}
		for i := 0; i+1 < len(vn.Content); i += 2 {
			k, v := vn.Content[i], vn.Content[i+1]
			at, err := strconv.ParseFloat(k.Value, 64)
			if err != nil {
				return m, yamlstrict.Errorf(k, yamlstrict.Join(vp, k.Value), "threshold must be a number")
			}
			d, err := degreeOf(v, yamlstrict.Join(vp, k.Value))
			if err != nil {
				return m, err
			}
			m.Value = append(m.Value, Step{At: at, Degree: d})
		}
	default:
		if c.Over == nil {
			return m, yamlstrict.Errorf(n, yamlstrict.Join(path, "over"), "a duration template needs over: the value from which the indicator counts as overloaded")
		}
		m.Over = *c.Over
		dn, dp := child(n, "duration"), yamlstrict.Join(path, "duration")
		if dn.Kind != yaml.MappingNode || len(dn.Content) == 0 {
			return m, yamlstrict.Errorf(dn, dp, "want a non-empty mapping {0s: degree, 30s: degree, ...}")
		}
		for i := 0; i+1 < len(dn.Content); i += 2 {
			k, v := dn.Content[i], dn.Content[i+1]
			after, err := time.ParseDuration(k.Value)
			if k.Value == "0" {
				after, err = 0, nil
			}
			if err != nil || after < 0 {
				return m, yamlstrict.Errorf(k, yamlstrict.Join(dp, k.Value), "bad duration %q (want e.g. 0s, 30s, 1m)", k.Value)
			}
			d, err := degreeOf(v, yamlstrict.Join(dp, k.Value))
			if err != nil {
				return m, err
			}
			m.Duration = append(m.Duration, Step{After: after, Degree: d})
		}
	}
	return m, nil
}

func degreeOf(v *yaml.Node, path string) (float64, error) {
	d, err := strconv.ParseFloat(v.Value, 64)
	if v.Kind != yaml.ScalarNode || err != nil || d < 0 || d != d {
		return 0, yamlstrict.Errorf(v, path, "degree must be a non-negative number, got %q", v.Value)
	}
	return d, nil
}
