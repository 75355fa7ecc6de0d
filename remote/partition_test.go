package remote_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/logbuf"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestPartitionedReplica cuts one of two replicas off NATS (its
// connection closed, the other nodes keep theirs): node a's enqueues
// keep being answered, none waits for the cut-off replica, the other
// replica takes them, and node a logs at WARN that the replica left.
func TestPartitionedReplica(t *testing.T) {
	logs := &logbuf.Buffer{}
	c := &cluster{t: t, log: slog.New(slog.NewTextHandler(logs, nil))}
	ma, _ := c.node(requestGraph, "a", nil)
	cut, kept := &recorder{}, &recorder{}
	_, nCut := c.node(requestGraph, "b", map[string]stage.Handler{"Work": cut})
	_, _ = c.node(requestGraph, "b", map[string]stage.Handler{"Work": kept})
	s := remoteSink(t, ma, "Work")
	waitFor(t, "both replicas in rotation", func() bool {
		r, ok := s.(interface{ Replicas() int })
		return ok && r.Replicas() == 2
	})
	nCut.Conn().Close()
	before := cut.count()
	admitted := 0
	for i := range 40 {
		if err := s.Enqueue(i); err == nil {
			admitted++
		}
	}
	if admitted == 0 {
		t.Fatal("nothing admitted once a replica was cut off")
	}
	waitFor(t, "the admitted events handled by the other replica", func() bool { return kept.count() >= admitted })
	if got := cut.count(); got != before {
		t.Errorf("the cut-off replica handled %d events after the cut", got-before)
	}
	waitFor(t, "node a's WARN line", func() bool {
		return strings.Contains(logs.String(), `out of rotation" node=a replica=b`)
	})
}
