package remote_test

import (
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/profiler"
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
	mb, _ := c.node(requestGraph, "b", map[string]stage.Handler{"Work": work})
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

	// The profiler's graph of each node names the nodes hosting every
	// stage; the stages hosted elsewhere are dashed, with their remote
	// sink's numbers, and so is the edge to them.
	graph := func(m *stage.Manager) string {
		p, err := profiler.New(m, profiler.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := p.Sample()
		return string(profiler.Dot(&s))
	}
	// Node a counts b's replica once it has heard b's heartbeat, which
	// may come after the events (they can travel to the stage's queue
	// group before any replica is known): wait for it.
	var dotA string
	waitFor(t, "node a to hear Work's replica", func() bool {
		dotA = graph(ma)
		return strings.Contains(dotA, `on b, 1 replica\n`)
	})
	dotB := graph(mb)
	for _, want := range []string{
		`label="node a"`,
		`"Src" [label="Src\nqueue 0\nthreads 1\non a"]`,
		`"Work" [style=dashed, label="Work\non b, 1 replica\n`,
		`"Picky" [style=dashed, label="Picky\non b, `,
		`rejected 0 (0/s)\nrtt p50 `,
		`"Src" -> "Work" [style=dashed, label="2"]`,
	} {
		if !strings.Contains(dotA, want) {
			t.Errorf("node a's graph lacks %s:\n%s", want, dotA)
		}
	}
	for _, want := range []string{`label="node b"`, `"Work" [label="Work\nqueue 0\nthreads 1\non b"]`, `"Src" [style=dashed, label="Src\non a, `} {
		if !strings.Contains(dotB, want) {
			t.Errorf("node b's graph lacks %s:\n%s", want, dotB)
		}
	}

	// Once node a's sink knows Src sends to Work (its traced edge, read
	// every heartbeat), node b draws what it receives as an edge from
	// Src rather than from outside.
	waitFor(t, "node b's edge from Src", func() bool {
		if err := src.Sink().Enqueue("z"); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(graph(mb), `"Src" -> "Work" [style=dashed, label="`)
	})
}
