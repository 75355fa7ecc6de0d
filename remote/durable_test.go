package remote_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

const durableGraph = `
global:
  cluster: {node: a}
stages:
  Src: {handler: t.Src, nodes: [a]}
  Work:
    handler: t.Work
    nodes: [b]
    queue: {threshold: 3}
    remote: {mode: durable, timeout: 1s, nakDelay: 10ms}
`

func TestDurableAckAfterHandlerNakOnFailure(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(durableGraph, "a", nil)
	work := &recorder{}
	work.failed.Store(1) // the first event fails once: nak'd, redelivered
	_, _ = c.node(durableGraph, "b", map[string]stage.Handler{"Work": work})
	s := remoteSink(t, ma, "Work")
	if err := s.Enqueue("x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue("y"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both events handled", func() bool { return work.count() == 2 })
	got := work.events()
	slices.SortFunc(got, func(a, b sink.Event) int { return strings.Compare(a.(string), b.(string)) })
	if got[0] != "x" || got[1] != "y" {
		t.Fatalf("handled %v", got)
	}
	// Acknowledged events leave the work queue.
	waitFor(t, "an empty stream", func() bool { return s.Len() == 0 })
	// The sender sees the one redelivery (of the nak'd event), also as
	// its metric.
	waitFor(t, "one redelivery in the sink's stats", func() bool {
		st, _ := remote.Stats(s)
		return st.Redelivered == 1
	})
	g, ok := ma.Metrics().Get("remote.Work.redelivered").(interface{ Value() int64 })
	if !ok || g.Value() != 1 {
		t.Fatalf("metric remote.Work.redelivered: %v", ma.Metrics().Get("remote.Work.redelivered"))
	}
	if st, _ := remote.Stats(s); st.Events != 2 || st.Rejected != 0 {
		t.Fatalf("stats %+v", st)
	}
	p, err := profiler.New(ma, profiler.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sample := p.Sample()
	if dot := string(profiler.Dot(&sample)); !strings.Contains(dot, `"Work" [style=dashed, label="Work\non b\n`) ||
		!strings.Contains(dot, `, redelivered 1"]`) {
		t.Fatalf("node a's graph does not show Work on b with its redelivery:\n%s", dot)
	}
}

func TestDurableFullStreamRejectsAtEnqueue(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(durableGraph, "a", nil)
	gate := make(chan struct{})
	_, _ = c.node(durableGraph, "b", map[string]stage.Handler{"Work": &recorder{gate: gate}})
	defer close(gate)
	s := remoteSink(t, ma, "Work")
	accepted := 0
	var err error
	for range 10 {
		if err = s.Enqueue("e"); err != nil {
			break
		}
		accepted++
	}
	if !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), "stream full") {
		t.Fatalf("got %v, want a full stream's rejection", err)
	}
	if accepted != 3 {
		t.Fatalf("the stream took %d events, want its limit 3 (nothing is acknowledged while the handler is held)", accepted)
	}
}

func TestDurableRedeliveryWhenReplicaDies(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(durableGraph, "a", nil)
	gate := make(chan struct{})
	defer close(gate)
	dying := &recorder{gate: gate, entered: make(chan struct{}, 1)}
	_, nb := c.node(durableGraph, "b", map[string]stage.Handler{"Work": dying})
	s := remoteSink(t, ma, "Work")
	if err := s.Enqueue("x"); err != nil {
		t.Fatal(err)
	}
	<-dying.entered // in its handler, not acknowledged
	_ = nb.Close()  // the node dies as far as the cluster can tell
	survivor := &recorder{}
	_, _ = c.node(durableGraph, "b", map[string]stage.Handler{"Work": survivor})
	waitFor(t, "the redelivery", func() bool { return survivor.count() == 1 })
	if got := survivor.events(); got[0] != "x" {
		t.Fatalf("redelivered %v", got)
	}
	waitFor(t, "the redelivery in the sender's stats", func() bool {
		st, _ := remote.Stats(s)
		return st.Redelivered == 1
	})
}
