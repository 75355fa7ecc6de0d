package stage

import (
	"fmt"

	"github.com/sandstorm-go/sandstorm/sink"
)

// buildPredicate returns the stage's admission predicate: the Go value if
// one was given, else the one described by the configuration block.
func (m *Manager) buildPredicate(s *Stage) (sink.Predicate, error) {
	if s.cfg.Predicate != nil {
		return s.cfg.Predicate, nil
	}
	if s.cfg.PredicateSpec == nil || s.cfg.PredicateSpec.Tag == "!!null" {
		return nil, nil
	}
	return nil, fmt.Errorf("%w: stage %q: predicate blocks are not supported yet", ErrInvalidConfig, s.name)
}
