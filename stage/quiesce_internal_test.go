package stage

import (
	"context"
	"runtime"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestQuiesceSeesEventEnteringService: an event moving from the queue into
// service while the manager looks whether everything is drained is seen
// by one of its two looks, so a graceful shutdown never closes the queues
// under a batch (a handler forwarding its event would get ErrClosed).
func TestQuiesceSeesEventEnteringService(t *testing.T) {
	m := NewManager(Options{})
	release := make(chan struct{})
	s, err := m.CreateStage("b", HandlerFunc(func(b []sink.Event) error {
		for range b {
			<-release
		}
		return nil
	}), StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	const rounds = 5000
	for i := 0; i < rounds; i++ {
		if err := s.Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
		// Look while the event is queued or entering service, until it is
		// in service (where its handler holds it).
		for {
			if m.quiesce(expired) == nil {
				t.Fatalf("round %d: the manager found nothing queued or in service while an event was", i)
			}
			if s.queue.InService() != 0 {
				break
			}
		}
		release <- struct{}{}
		for s.queue.InService() != 0 || s.queue.Pending() != 0 {
			runtime.Gosched()
		}
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
