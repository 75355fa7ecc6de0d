package stage_test

import (
	"context"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// request carries where to send the reply: the asker's own sink.
type request struct{ replyTo sink.Sink }

// asker sends requests to Server with its own sink to reply to.
type asker struct {
	self, server sink.Sink
	replies      chan sink.Event
}

func (a *asker) Init(c *stage.Context) (err error) {
	if a.self, err = c.Sink(c.Stage().Name()); err != nil {
		return err
	}
	a.server, err = c.Sink("Server")
	return err
}

func (a *asker) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch e.(type) {
		case string: // a reply
			a.replies <- e
		default: // a go signal from outside
			if err := a.server.Enqueue(request{replyTo: a.self}); err != nil {
				return err
			}
		}
	}
	return nil
}

// server answers on the sink a request names, through Context.Traced.
type server struct{ c *stage.Context }

func (s *server) Init(c *stage.Context) error { s.c = c; return nil }
func (s *server) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		if err := s.c.Traced(e.(request).replyTo).Enqueue("reply"); err != nil {
			return err
		}
	}
	return nil
}

// TestTracedReplySink: a reply sent on a sink handed over in an event is
// traced from the stage that sends it (Server → Asker), not as a loop on
// the stage that asked for the sink.
func TestTracedReplySink(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	a := &asker{replies: make(chan sink.Event, 1)}
	if _, err := m.CreateStage("Asker", a, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("Server", &server{}, stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	started(t, m)
	st, _ := m.Stage("Asker")
	if err := st.Sink().Enqueue(struct{}{}); err != nil {
		t.Fatal(err)
	}
	<-a.replies
	// An edge is counted once the enqueue has returned, which may be
	// after the reply was handled: let every handler finish first.
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[[2]string]uint64{}
	for _, e := range m.Edges() {
		got[[2]string{e.From, e.To}] = e.Count
	}
	want := map[[2]string]uint64{{"", "Asker"}: 1, {"Asker", "Server"}: 1, {"Server", "Asker"}: 1}
	if len(got) != len(want) {
		t.Fatalf("edges %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("edges %v, want %v", got, want)
		}
	}
}
