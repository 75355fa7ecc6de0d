package profiler

import (
	"math"
	rtmetrics "runtime/metrics"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/stage"
)

// Value is one named number of a sample.
type Value struct {
	Name  string
	Value float64
}

// StageSample is one stage's values at one instant. Names are relative to
// the stage: the metrics the runtime registers under "<stage>.<name>"
// (queue.length, enqueued, rejected.full, rejected.predicate,
// rejected.closed, dropped, pool.size, batching.factor, the controllers'
// pool.throughput, pool.best.size, pool.best.throughput, batching.best and
// batching.throughput, ...; histograms as <name>.mean/.p50/.p90/.p99/.max,
// all NaN — "no samples" — when nothing was added to the histogram since
// the previous sample, as for an idle stage's service.ns),
// the handler's own values (stage.Context.Profile), "predicate.<name>" for
// what the admission predicate reports through Inspect (registered in the
// manager's registry by the profiler: see the package documentation; a
// multiclass controller's per-class values are "predicate.class<N>.<name>"),
// and the rates the profiler derives between two samples: rate.enqueued,
// rate.handled and rate.rejected (events per second; rejected counts
// full-queue and predicate refusals).
//
// dropped is not a further way of losing events: it counts the refusals of
// EnqueueLossy, each of which is also counted as rejected.full,
// rejected.predicate or rejected.closed (whichever refused it), so dropped
// ≤ rejected.full + rejected.predicate + rejected.closed, and the
// rejections must not be added to dropped.
//
// In a cluster (a manager built by package remote), Nodes lists the nodes
// the configuration hosts the stage on: nil for a stage on every node, and
// this node alone for a stage the configuration does not name.
type StageSample struct {
	Name   string
	Nodes  []string // nil outside a cluster
	Values []Value  // sorted by name
}

// Get returns the stage's value called name.
func (s *StageSample) Get(name string) (float64, bool) { return valueOf(s.Values, name) }

// valueOf returns the value called name in vs, sorted by name.
func valueOf(vs []Value, name string) (float64, bool) {
	i := sort.Search(len(vs), func(i int) bool { return vs[i].Name >= name })
	if i < len(vs) && vs[i].Name == name {
		return vs[i].Value, true
	}
	return 0, false
}

// Sample is what the profiler records at one instant.
type Sample struct {
	Seq  uint64 // 1 for the first sample of a profiler, then +1
	Time time.Time
	// Process holds the Go runtime's numbers: mem.heap (bytes of heap
	// objects), mem.total (bytes mapped by the runtime), goroutines and
	// gc.cycles.
	Process []Value
	Stages  []StageSample // in the manager's creation order
	// Other holds metrics of the manager's registry that belong to no
	// stage, under their full names.
	Other []Value
	Edges []stage.Edge // the traced stage graph
	// Node is the cluster node this process runs as (stage.Config.Node),
	// "" outside a cluster: then Remote is empty and no stage has Nodes.
	Node string
	// Remote holds the stages hosted on other nodes only, in
	// configuration order, each with the numbers of this node's remote
	// sink for it: the "remote.<stage>.<name>" metrics package remote
	// registers (sent, events, rejected, retransmits, dropped,
	// rtt.p50.us, rtt.p99.us, and redelivered, naks and acks where a
	// durable replica runs here), relative to the stage, and the rates
	// the profiler derives between two samples: rate.events (events
	// admitted by a replica per second) and rate.rejected (rejected
	// requests per second).
	Remote []StageSample
}

// RemoteStage returns the named stage hosted on other nodes.
func (s *Sample) RemoteStage(name string) (*StageSample, bool) {
	for i := range s.Remote {
		if s.Remote[i].Name == name {
			return &s.Remote[i], true
		}
	}
	return nil, false
}

// OtherValue returns the value called name among the metrics that belong
// to no stage.
func (s *Sample) OtherValue(name string) (float64, bool) { return valueOf(s.Other, name) }

// Stage returns the named stage's sample.
func (s *Sample) Stage(name string) (*StageSample, bool) {
	for i := range s.Stages {
		if s.Stages[i].Name == name {
			return &s.Stages[i], true
		}
	}
	return nil, false
}

var runtimeNames = []struct{ metric, name string }{
	{"/memory/classes/heap/objects:bytes", "mem.heap"},
	{"/memory/classes/total:bytes", "mem.total"},
	{"/sched/goroutines:goroutines", "goroutines"},
	{"/gc/cycles/total:gc-cycles", "gc.cycles"},
}

// counters are the cumulative stage counters rates are derived from.
type counters struct {
	at                          time.Time
	enqueued, handled, rejected uint64
	// dist holds the update counts of the stage's histograms and timers
	// (service.ns, queue.wait.ns, ...) by relative name.
	dist map[string]int64
}

// sampler takes samples of a manager; it remembers the previous counters of
// every stage to derive rates.
type sampler struct {
	m   *stage.Manager
	now func() time.Time

	mu   sync.Mutex
	seq  uint64
	prev map[*stage.Stage]counters
	// prevRemote holds the remote sinks' counters (enqueued: events
	// admitted, rejected: requests rejected) by stage name.
	prevRemote map[string]counters
	rt         []rtmetrics.Sample
	preds      *predicateGauges
	// released is set by release: a sample taken afterwards (Profiler.Sample
	// after Shutdown) registers no gauges, since nothing would remove them.
	released bool
}

func newSampler(m *stage.Manager, now func() time.Time) *sampler {
	if now == nil {
		now = time.Now
	}
	s := &sampler{m: m, now: now, prev: map[*stage.Stage]counters{}, preds: newPredicateGauges(m.Metrics())}
	for _, n := range runtimeNames {
		s.rt = append(s.rt, rtmetrics.Sample{Name: n.metric})
	}
	return s
}

// take samples the manager now.
func (s *sampler) take() Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	out := Sample{Seq: s.seq, Time: s.now()}

	rtmetrics.Read(s.rt)
	for i, r := range s.rt {
		v := 0.0
		switch r.Value.Kind() {
		case rtmetrics.KindUint64:
			v = float64(r.Value.Uint64())
		case rtmetrics.KindFloat64:
			v = r.Value.Float64()
		}
		out.Process = append(out.Process, Value{runtimeNames[i].name, v})
	}

	stages := s.m.Stages()
	if !s.released {
		s.preds.sync(stages)
	}
	index := make(map[string]int, len(stages))
	out.Stages = make([]StageSample, len(stages))
	for i, st := range stages {
		out.Stages[i].Name = st.Name()
		index[st.Name()] = i
	}
	dists := make([]map[string]int64, len(stages))
	s.m.Metrics().Each(func(name string, v any) {
		if i, rel, ok := owner(index, name); ok {
			out.Stages[i].Values = appendMetric(out.Stages[i].Values, rel, v)
			if n, ok := distCount(v); ok {
				if dists[i] == nil {
					dists[i] = map[string]int64{}
				}
				dists[i][rel] = n
			}
		} else {
			out.Other = appendMetric(out.Other, name, v)
		}
	})

	next := make(map[*stage.Stage]counters, len(stages))
	for i, st := range stages {
		ss := &out.Stages[i]
		stats := st.Stats()
		c := counters{at: out.Time, enqueued: stats.Enqueued, handled: stats.Events,
			rejected: stats.RejectedFull + stats.RejectedPredicate, dist: dists[i]}
		// A distribution nothing was added to since the previous sample
		// (or ever) has no samples in this window: its reservoir would
		// repeat the last busy window's numbers, so they read NaN (null
		// in metrics.json, "no samples" on the dashboard) instead.
		for rel, n := range c.dist {
			if n == s.prev[st].dist[rel] {
				noSamples(ss.Values, rel)
			}
		}
		var re, rh, rr float64
		if p, ok := s.prev[st]; ok {
			if dt := c.at.Sub(p.at).Seconds(); dt > 0 {
				re = float64(c.enqueued-p.enqueued) / dt
				rh = float64(c.handled-p.handled) / dt
				rr = float64(c.rejected-p.rejected) / dt
			}
		}
		next[st] = c
		ss.Values = append(ss.Values,
			Value{"rate.enqueued", re}, Value{"rate.handled", rh}, Value{"rate.rejected", rr})
		sortValues(ss.Values)
	}
	s.prev = next
	sortValues(out.Other)
	out.Edges = s.m.Edges()
	s.placeLocked(&out)
	return out
}

// placeLocked fills in, for a manager that is one node of a cluster, the
// nodes hosting each stage and the stages hosted elsewhere with their
// remote sinks' numbers (Sample.Remote).
func (s *sampler) placeLocked(out *Sample) {
	cfg := s.m.Config()
	if cfg == nil || cfg.Node == "" {
		return
	}
	out.Node = cfg.Node
	configured := make(map[string][]string, len(cfg.Stages))
	for _, ns := range cfg.Stages {
		configured[ns.Name] = ns.Config.Nodes
	}
	for i := range out.Stages {
		ss := &out.Stages[i]
		if nodes, ok := configured[ss.Name]; ok {
			ss.Nodes = slices.Clone(nodes)
		} else {
			ss.Nodes = []string{cfg.Node}
		}
	}
	next := map[string]counters{}
	for _, ns := range cfg.Stages {
		if ns.Config.HostedOn(cfg.Node) {
			continue
		}
		rs := StageSample{Name: ns.Name, Nodes: slices.Clone(ns.Config.Nodes)}
		prefix := "remote." + ns.Name + "."
		for _, v := range out.Other {
			if rel, ok := strings.CutPrefix(v.Name, prefix); ok {
				rs.Values = append(rs.Values, Value{rel, v.Value})
			}
		}
		events, _ := rs.Get("events")
		rejected, _ := rs.Get("rejected")
		c := counters{at: out.Time, enqueued: uint64(events), rejected: uint64(rejected)}
		var re, rr float64
		if p, ok := s.prevRemote[ns.Name]; ok {
			if dt := c.at.Sub(p.at).Seconds(); dt > 0 && c.enqueued >= p.enqueued && c.rejected >= p.rejected {
				re = float64(c.enqueued-p.enqueued) / dt
				rr = float64(c.rejected-p.rejected) / dt
			}
		}
		next[ns.Name] = c
		rs.Values = append(rs.Values, Value{"rate.events", re}, Value{"rate.rejected", rr})
		sortValues(rs.Values)
		out.Remote = append(out.Remote, rs)
	}
	s.prevRemote = next
	drawDeliveries(out, s.m.RemoteSink)
}

// release unregisters the predicate gauges take registered.
func (s *sampler) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.preds.unregister()
	s.released = true
}

// owner finds the stage a registry name belongs to: the longest stage name
// that prefixes it followed by a dot.
func owner(index map[string]int, name string) (int, string, bool) {
	for j := strings.LastIndexByte(name, '.'); j > 0; j = strings.LastIndexByte(name[:j], '.') {
		if i, ok := index[name[:j]]; ok {
			return i, name[j+1:], true
		}
	}
	return 0, "", false
}

// appendMetric flattens one go-metrics value into named numbers. Types
// that carry no number (health checks) are left out.
func appendMetric(out []Value, name string, v any) []Value {
	switch m := v.(type) {
	case metrics.Gauge:
		return append(out, Value{name, float64(m.Value())})
	case metrics.GaugeFloat64:
		return append(out, Value{name, m.Value()})
	case metrics.Counter:
		return append(out, Value{name, float64(m.Count())})
	case metrics.Histogram:
		h := m.Snapshot()
		return appendDistribution(out, name, h.Mean(), h.Percentiles(quantiles), h.Max())
	case metrics.Timer:
		t := m.Snapshot()
		out = appendDistribution(out, name, t.Mean(), t.Percentiles(quantiles), t.Max())
		return append(out, Value{name + ".rate1", t.Rate1()})
	case metrics.Meter:
		mm := m.Snapshot()
		return append(out, Value{name + ".count", float64(mm.Count())}, Value{name + ".rate1", mm.Rate1()})
	case metrics.EWMA:
		return append(out, Value{name, m.Rate()})
	}
	return out
}

var quantiles = []float64{0.5, 0.9, 0.99}

// distSuffixes are the values appendDistribution makes of a distribution.
var distSuffixes = []string{".mean", ".p50", ".p90", ".p99", ".max"}

// distCount returns how many values were ever added to a histogram or a
// timer.
func distCount(v any) (int64, bool) {
	switch m := v.(type) {
	case metrics.Histogram:
		return m.Count(), true
	case metrics.Timer:
		return m.Count(), true
	}
	return 0, false
}

// noSamples sets the values of distribution name in vs to NaN.
func noSamples(vs []Value, name string) {
	for i := range vs {
		if rest, ok := strings.CutPrefix(vs[i].Name, name); ok && slices.Contains(distSuffixes, rest) {
			vs[i].Value = math.NaN()
		}
	}
}

func appendDistribution(out []Value, name string, mean float64, q []float64, max int64) []Value {
	return append(out,
		Value{name + ".mean", mean},
		Value{name + ".p50", q[0]},
		Value{name + ".p90", q[1]},
		Value{name + ".p99", q[2]},
		Value{name + ".max", float64(max)})
}

func sortValues(vs []Value) {
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Name < vs[j].Name })
}
