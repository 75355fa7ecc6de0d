package stage

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// stageRetune is what a Reload changes in place on one kept stage: the
// keys it applies and the configuration the stage reports afterwards
// (its running one with those keys replaced), plus what waits for a
// restart.
type stageRetune struct {
	s     *Stage
	cfg   StageConfig // what the stage runs once the keys are applied
	keys  []string    // applied in place, in the order below
	later []string    // "stages.X.key: reason", not applied
	pred  sink.Predicate
}

// planRetune compares stage s's running configuration with next, and
// builds the new predicate if it changed.
func (m *Manager) planRetune(s *Stage, next StageConfig) (*stageRetune, error) {
	cur := s.Config()
	r := &stageRetune{s: s, cfg: cur}
	later := func(key, why string) {
		r.later = append(r.later, fmt.Sprintf("stages.%s.%s: %s", s.name, key, why))
	}
	if cur.Handler != next.Handler {
		later("handler", "a running stage keeps its handler")
	}
	if !sameDecoder(cur.Args, next.Args) {
		later("args", "the handler read them in its Init")
	}
	if cur.Queue.Dispatch != next.Queue.Dispatch || cur.Queue.Burst != next.Queue.Burst {
		later("queue.dispatch", "the dispatch regulator is built with the stage")
	}
	if !reflect.DeepEqual(cur.Scheduler, next.Scheduler) {
		later("scheduler", "the queue's scheduler is installed with the stage")
	}
	if cur.Ordering != next.Ordering || cur.Keyed != next.Keyed {
		later("ordering", "the queue's ordering is installed with the stage")
	}
	if !reflect.DeepEqual(cur.Supervisor, next.Supervisor) {
		later("supervisor", "the supervision tree is built at start")
	}
	if !slices.Equal(cur.Nodes, next.Nodes) {
		later("nodes", "the cluster's routes are made at start")
	}
	for _, key := range changedSections(cur.sections, next.sections) {
		later(key, "its package reads it at start")
	}
	if cur.ThreadPool.Weight != next.ThreadPool.Weight {
		later("threadpool.weight", "the shared pool's weights are set at start")
	}
	if cur.ThreadPool.Initial != next.ThreadPool.Initial {
		later("threadpool.initial", "it is the size at start")
	}

	if cur.Queue.Threshold != next.Queue.Threshold {
		r.keys = append(r.keys, "queue.threshold")
		r.cfg.Queue.Threshold = next.Queue.Threshold
	}
	if cur.Queue.MaxTime != next.Queue.MaxTime {
		r.keys = append(r.keys, "queue.max_time")
		r.cfg.Queue.MaxTime = next.Queue.MaxTime
	}
	if next.Predicate != nil || (cur.Predicate == nil && !sameDecoder(cur.PredicateSpec, next.PredicateSpec)) {
		p, err := m.predicateFor(s.name, next)
		if err != nil {
			return nil, err
		}
		r.pred = p
		r.keys = append(r.keys, "predicate")
		r.cfg.Predicate, r.cfg.PredicateSpec = next.Predicate, next.PredicateSpec
	}
	tp, ntp := cur.ThreadPool, next.ThreadPool
	if tp.Min != ntp.Min || tp.Max != ntp.Max || !reflect.DeepEqual(tp.Controller, ntp.Controller) {
		if s.pool == nil {
			later("threadpool", "the stage runs on the shared thread pool, whose size is fixed")
		} else {
			r.keys = append(r.keys, "threadpool")
			r.cfg.ThreadPool.Min, r.cfg.ThreadPool.Max, r.cfg.ThreadPool.Controller = ntp.Min, ntp.Max, ntp.Controller
		}
	}
	if !reflect.DeepEqual(cur.Batching, next.Batching) {
		if cur.Batching.batchingConfig().Enabled != next.Batching.batchingConfig().Enabled {
			later("batching.controller.enabled", "the batching controller is started with the stage")
		} else {
			r.keys = append(r.keys, "batching")
			r.cfg.Batching = next.Batching
		}
	}
	return r, nil
}

// apply makes the planned changes to the running stage, in an order that
// keeps the stage consistent for the producers and workers running
// meanwhile: the queue's bound first (the pool's controller fits its
// threshold to it), then the predicate (stageSink.SetPredicate: events
// admitted by the old one complete on it, so its tickets and counts stay
// right), the pool, the batching factor. It returns what it could not
// apply after all.
func (r *stageRetune) apply() (later []string) {
	s := r.s
	for _, key := range r.keys {
		switch key {
		case "queue.threshold":
			s.queue.SetCapacity(r.cfg.Queue.Threshold)
		case "queue.max_time":
			s.queue.SetMaxAge(r.cfg.Queue.MaxTime)
		case "predicate":
			s.external.SetPredicate(r.pred) // under the current memory pressure
		case "threadpool":
			tp := r.cfg.ThreadPool
			err := s.pool.Retune(threadpool.Config{Min: tp.Min, Max: tp.Max, Controller: tp.Controller})
			if errors.Is(err, threadpool.ErrNotRetunable) {
				later = append(later, fmt.Sprintf("stages.%s.threadpool: %v", s.name, err))
				// The stage runs with its controller as it was.
				old := s.Config().ThreadPool.Controller
				r.cfg.ThreadPool.Controller.Enabled, r.cfg.ThreadPool.Controller.Disabled = old.Enabled, old.Disabled
				r.cfg.ThreadPool.Controller.Type = old.Type
			}
		case "batching":
			bc := r.cfg.Batching.batchingConfig()
			if s.batcher != nil {
				_ = s.batcher.ctrl.SetConfig(bc) // validated with the file
				s.batchSize.Store(int32(s.batcher.ctrl.BatchSize()))
			} else {
				s.batchSize.Store(int32(fixedBatchSize(bc.Max)))
			}
		}
	}
	r.cfg.Factory = s.cfg.Factory
	s.live.Store(&r.cfg)
	return append(r.later, later...)
}

// fixedBatchSize is the batching factor of a stage without a batching
// controller: its max (0 → 1000).
func fixedBatchSize(max int) int {
	if max <= 0 {
		return 1000
	}
	return max
}

// changedSections returns the keys of the registered stage sections that
// differ between a and b.
func changedSections(a, b sectionValues) []string {
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || !reflect.DeepEqual(v, w) {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// sameDecoder reports whether two blocks hold the same YAML, wherever
// they are in their files (a global block a stage inherits is the same
// as the stage's own copy of it). Decoders not made from YAML are the
// same only if they are deeply equal.
func sameDecoder(a, b Decoder) bool {
	if !present(a) || !present(b) {
		return present(a) == present(b)
	}
	na, nb := nodeOf(a), nodeOf(b)
	if na == nil || nb == nil {
		return reflect.DeepEqual(a, b)
	}
	return sameNode(na, nb)
}

// sameNode compares YAML nodes by content: kinds, tags, values and
// children, not positions or comments; aliases are followed.
func sameNode(a, b *yaml.Node) bool {
	for a != nil && a.Kind == yaml.AliasNode {
		a = a.Alias
	}
	for b != nil && b.Kind == yaml.AliasNode {
		b = b.Alias
	}
	if a == nil || b == nil {
		return a == b
	}
	if a.Kind != b.Kind || a.Tag != b.Tag || a.Value != b.Value || len(a.Content) != len(b.Content) {
		return false
	}
	for i := range a.Content {
		if !sameNode(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}
