package profiler

import (
	"math"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/stage"
)

// inspector is what predicates implement to report their state (see
// package enqueuepred); the profiler finds it by type assertion.
type inspector interface {
	Inspect(report func(name string, value float64))
}

// predicateGauges mirrors what the stages' admission predicates report
// through Inspect (the response-time controllers' p90, admitted rate and
// target per class, token buckets, counts) into the manager's go-metrics
// registry, as functional gauges named "<stage>.predicate.<name>". Each
// gauge reads the stage's current predicate when it is read, so the
// registry, the samples, metrics.json and /metrics agree; a name the
// predicate no longer reports (it was replaced at run time) reads NaN
// until the next sync unregisters it.
//
// The profiler owns the "<stage>.predicate." names: sync replaces a value
// registered under one of them by someone else.
type predicateGauges struct {
	reg    metrics.Registry
	stages map[*stage.Stage]*predicateStage
}

type predicateStage struct {
	prefix string          // "<stage>.predicate."
	names  map[string]bool // registered, relative to prefix
}

func newPredicateGauges(reg metrics.Registry) *predicateGauges {
	return &predicateGauges{reg: reg, stages: map[*stage.Stage]*predicateStage{}}
}

// sync registers a gauge for every name the stages' predicates report now
// and unregisters those of names no longer reported and of stages gone.
func (g *predicateGauges) sync(stages []*stage.Stage) {
	live := make(map[*stage.Stage]bool, len(stages))
	for _, st := range stages {
		live[st] = true
	}
	// Stages gone first: a stage destroyed and re-created under the same
	// name has the same gauge names, which the new stage registers below.
	for st, ps := range g.stages {
		if !live[st] {
			ps.unregister(g.reg)
			delete(g.stages, st)
		}
	}
	for _, st := range stages {
		ps := g.stages[st]
		if ps == nil {
			ps = &predicateStage{prefix: st.Name() + ".predicate.", names: map[string]bool{}}
			g.stages[st] = ps
		}
		reported := map[string]bool{}
		if in, ok := st.Sink().Predicate().(inspector); ok {
			in.Inspect(func(name string, _ float64) { reported[name] = true })
		}
		for name := range reported {
			if ps.names[name] {
				continue
			}
			full := ps.prefix + name
			g.reg.Unregister(full)
			if err := g.reg.Register(full, metrics.NewFunctionalGaugeFloat64(inspectValue(st, name))); err == nil {
				ps.names[name] = true
			}
		}
		for name := range ps.names {
			if !reported[name] {
				g.reg.Unregister(ps.prefix + name)
				delete(ps.names, name)
			}
		}
	}
}

// unregister removes every gauge sync registered.
func (g *predicateGauges) unregister() {
	for st, ps := range g.stages {
		ps.unregister(g.reg)
		delete(g.stages, st)
	}
}

func (ps *predicateStage) unregister(reg metrics.Registry) {
	for name := range ps.names {
		reg.Unregister(ps.prefix + name)
	}
	ps.names = map[string]bool{}
}

// inspectValue returns a function reading the value called name from the
// stage's current predicate, NaN when it reports none.
func inspectValue(st *stage.Stage, name string) func() float64 {
	return func() float64 {
		v := math.NaN()
		if in, ok := st.Sink().Predicate().(inspector); ok {
			in.Inspect(func(n string, x float64) {
				if n == name {
					v = x
				}
			})
		}
		return v
	}
}
