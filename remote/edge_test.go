package remote_test

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// forwarder passes its events on to the stage named to.
type forwarder struct {
	to  string
	out sink.Sink
}

func (f *forwarder) Init(c *stage.Context) (err error) {
	f.out, err = c.Sink(f.to)
	return err
}

func (f *forwarder) HandleEvents(batch []sink.Event) error { return f.out.EnqueueMany(batch) }

// A stage's sink for a stage on another node is the remote sink, and its
// enqueues are edges of this node's stage graph (drawn by the profiler).
func TestRemoteEdgesAreTraced(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(requestGraph, "a", map[string]stage.Handler{"Src": &forwarder{to: "Work"}})
	work := &recorder{}
	_, _ = c.node(requestGraph, "b", map[string]stage.Handler{"Work": work})
	src, ok := ma.Stage("Src")
	if !ok {
		t.Fatal("node a does not host Src")
	}
	if err := src.Sink().EnqueueMany([]sink.Event{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the forwarded events", func() bool { return work.count() == 2 })
	// The edge is counted once EnqueueMany returns on node a, which may
	// be after node b has handled the events: wait for it too.
	traced := func() bool {
		for _, e := range ma.Edges() {
			if e.From == "Src" && e.To == "Work" && e.Count == 2 {
				return true
			}
		}
		return false
	}
	waitFor(t, "the traced edge Src -> Work (2)", traced)
}
