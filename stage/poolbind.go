package stage

import (
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

// bindPool gives every saturated predicate (enqueuepred.NewSaturated) in p (p itself or nested in
// it) the stage's own thread pool, so that admission control stays off
// while that pool can still grow (thesis §8.2.1): its size below its
// limit, which is its max or the lower limit the SEDA controller's
// thrashing detection set, or one of its workers idle.
//
// A stage on the shared pool binds nothing: the shared pool's size is
// fixed, so it never grows. A Saturated there applies its predicate once
// `threads` events of the stage are in service, or always when threads
// is not set.
func (s *Stage) bindPool(p sink.Predicate) {
	if s.pool == nil {
		return
	}
	sink.Walk(p, func(q sink.Predicate) {
		if sat, ok := q.(interface{ BindPool(enqueuepred.PoolState) }); ok {
			sat.BindPool(s.pool)
		}
	})
}
