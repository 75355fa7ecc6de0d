package stage_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// blockedCollector collects events; its first batch waits for gate.
type blockedCollector struct {
	collector
	entered chan struct{}
	gate    chan struct{}
	first   bool
}

func (b *blockedCollector) HandleEvents(batch []sink.Event) error {
	if !b.first {
		b.first = true
		close(b.entered)
		<-b.gate
	}
	return b.collector.HandleEvents(batch)
}

// TestMonitorEventsPassAdmission: monitoring stages whose queue is full or
// whose predicate sheds everything still get every monitor event
// (StageFailed, StageRestarted, StageTerminated are non-rejectable).
func TestMonitorEventsPassAdmission(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	full := &blockedCollector{entered: make(chan struct{}), gate: make(chan struct{})}
	fullSt, err := m.CreateStage("Full", full, stage.StageConfig{
		Queue:    stage.QueueConfig{Threshold: 1},
		Batching: stage.BatchingConfig{Max: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	shedding := &collector{}
	shedSt, err := m.CreateStage("Shedding", shedding, stage.StageConfig{Predicate: enqueuepred.NewThreshold(0)})
	if err != nil {
		t.Fatal(err)
	}
	fragile, err := m.CreateSupervised("Fragile", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { return errBad })
	}, stage.StageConfig{Supervisor: &stage.SupervisorConfig{RestartOn: stage.RestartOnError}})
	if err != nil {
		t.Fatal(err)
	}
	probe := newChanSink(10)
	for _, s := range []sink.Sink{fullSt.Sink(), shedSt.Sink(), probe} { // probe last: it hears last
		if _, err := m.Monitor("Fragile", s); err != nil {
			t.Fatal(err)
		}
	}
	started(t, m)
	gateOpen := false
	defer func() {
		if !gateOpen {
			close(full.gate)
		}
	}()

	_ = fullSt.Sink().Enqueue("running")
	<-full.entered
	if err := fullSt.Sink().Enqueue("queued"); err != nil {
		t.Fatal(err)
	}
	if err := fullSt.Sink().Enqueue("refused"); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("Full admitted an event beyond its capacity: %v", err)
	}
	if err := shedSt.Sink().Enqueue("refused"); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("Shedding admitted an ordinary event: %v", err)
	}

	_ = fragile.Sink().Enqueue("boom")
	probe.until(t, isRestarted)
	if err := m.DestroyStage("Fragile"); err != nil {
		t.Fatal(err)
	}
	probe.until(t, isTerminated)
	if n := m.MonitorRejections(); n != 0 {
		t.Fatalf("%d monitor events rejected", n)
	}
	close(full.gate)
	gateOpen = true
	shutdown(t, m)

	kinds := func(events []sink.Event) []string {
		var out []string
		for _, e := range events {
			switch e.(type) {
			case stage.StageFailed:
				out = append(out, "failed")
			case stage.StageRestarted:
				out = append(out, "restarted")
			case stage.StageTerminated:
				out = append(out, "terminated")
			default:
				out = append(out, e.(string))
			}
		}
		return out
	}
	want := []string{"running", "queued", "failed", "restarted", "terminated"}
	if got := kinds(full.snapshot()); !slices.Equal(got, want) {
		t.Fatalf("Full got %v, want %v", got, want)
	}
	if got := kinds(shedding.snapshot()); !slices.Equal(got, want[2:]) {
		t.Fatalf("Shedding got %v, want %v", got, want[2:])
	}
}
