package stage

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

// ErrLinked is wrapped by the error of a StageFailed that reports events
// cancelled because another event of their principal failed
// (OrderingConfig.Linked).
//
// The failed events are those an EventError names, or every event of a
// batch that failed as a whole (Failure.Whole: a panic or an error naming
// no event), since any of them may have been left unhandled; batches of
// several principals then take them all down, so handlers of linked
// stages should name their failed events. Only the events of those
// principals still queued on the failed stage are cancelled: events
// already handed to a batch, queued on other stages (even of the same
// supervision group) or enqueued after the failure are not touched.
var ErrLinked = errors.New("stage: cancelled with a failed event of the same principal")

// LinkedError is the error of a linked cancellation. It wraps ErrLinked
// only: the original failure is in Cause.
type LinkedError struct {
	Principals []string // principal IDs whose events were cancelled, sorted
	Cause      error    // the failure of the event that took them down
}

func (e *LinkedError) Error() string {
	return fmt.Sprintf("stage: cancelled: an event of principal %s failed: %v", strings.Join(e.Principals, ", "), e.Cause)
}

// Unwrap returns ErrLinked.
func (e *LinkedError) Unwrap() error { return ErrLinked }

// failLinked takes the queued events that share a principal with the
// failed events of fs out of the queue and reports them to the monitors.
func (s *Stage) failLinked(fs []Failure) {
	ids := map[string]bool{}
	var causes []error
	for _, f := range fs {
		causes = append(causes, f.Err)
		for _, e := range f.Events {
			if p, ok := enqueuepred.PrincipalOf(e); ok && p.ID != "" {
				ids[p.ID] = true
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	removed := s.queue.RemoveIf(func(e sink.Event) bool {
		p, ok := enqueuepred.PrincipalOf(e)
		return ok && ids[p.ID]
	})
	if len(removed) == 0 {
		return
	}
	s.linked.Add(uint64(len(removed)))
	principals := make([]string, 0, len(ids))
	for id := range ids {
		principals = append(principals, id)
	}
	slices.Sort(principals)
	cause := causes[0]
	if len(causes) > 1 {
		cause = errors.Join(causes...)
	}
	f := fs[0]
	lf := Failure{Stage: s.name, Err: &LinkedError{Principals: principals, Cause: cause}, Events: removed, Time: f.Time, Instance: f.Instance}
	s.mgr.log.Warn("linked events cancelled", "stage", s.name, "principals", principals, "events", len(removed), "err", cause)
	s.mgr.notify(s, StageFailed{lf}, false)
}
