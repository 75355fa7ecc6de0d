package stage

import (
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

// buildPredicate returns the stage's admission predicate: the Go value if
// one was given, else the one described by the configuration block.
func (m *Manager) buildPredicate(s *Stage) (sink.Predicate, error) {
	return m.predicateFor(s.name, s.cfg)
}

// predicateFor builds the predicate cfg gives the stage called name (a
// Reload builds a changed one before it installs it).
func (m *Manager) predicateFor(name string, cfg StageConfig) (sink.Predicate, error) {
	if cfg.Predicate != nil {
		return cfg.Predicate, nil
	}
	spec := cfg.PredicateSpec
	if !present(spec) {
		return nil, nil
	}
	p, err := enqueuepred.FromSpec(spec, enqueuepred.Env{
		Stage:  name,
		Logger: m.log,
		Lookup: func(name string) (sink.Sink, bool) {
			st, ok := m.Stage(name)
			if !ok {
				return nil, false
			}
			return st.Sink(), true
		},
		ResponseTime: m.responseTime,
		Shared:       m.predicateShared(),
	})
	if err != nil {
		if _, ok := err.(*ConfigError); !ok {
			err = &ConfigError{File: spec.File(), Err: err}
		}
		return nil, err
	}
	return p, nil
}

// predicateShared returns the manager's shared predicate state (group rates).
func (m *Manager) predicateShared() *enqueuepred.Shared {
	return m.predShared
}

// responseTime estimates a stage's 90th-percentile response time from the
// runtime's sampled queueing and service times.
func (m *Manager) responseTime(name string) (time.Duration, bool) {
	st, ok := m.Stage(name)
	if !ok || st.metrics == nil || st.metrics.serviceTime.Count() == 0 {
		return 0, false
	}
	q := st.metrics.queueTime.Percentile(0.9)
	s := st.metrics.serviceTime.Percentile(0.9)
	return time.Duration(q + s), true
}
