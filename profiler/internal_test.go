package profiler

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestRates checks the derived rates with an explicit clock.
func TestRates(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("A", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{
		Predicate: sink.PredicateFunc(func(e sink.Event) bool { return e.(int) >= 0 }),
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s := newSampler(m, func() time.Time { return now })
	rate := func(smp Sample, name string) float64 {
		v, ok := smp.Stages[0].Get(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return v
	}
	first := s.take()
	if rate(first, "rate.enqueued") != 0 || first.Seq != 1 || !first.Time.Equal(now) {
		t.Fatalf("first sample: %+v", first)
	}
	// Nothing consumes (the manager is not started): 300 accepted and 50
	// rejected over 2 s.
	for i := 0; i < 300; i++ {
		_ = st.Sink().Enqueue(i)
	}
	for i := 0; i < 50; i++ {
		_ = st.Sink().Enqueue(-1)
	}
	now = now.Add(2 * time.Second)
	second := s.take()
	if got := rate(second, "rate.enqueued"); got != 150 {
		t.Errorf("rate.enqueued = %v, want 150", got)
	}
	if got := rate(second, "rate.rejected"); got != 25 {
		t.Errorf("rate.rejected = %v, want 25", got)
	}
	if got := rate(second, "rate.handled"); got != 0 {
		t.Errorf("rate.handled = %v, want 0", got)
	}
	// The same instant twice: no division by zero, rates read 0.
	third := s.take()
	if got := rate(third, "rate.enqueued"); got != 0 || third.Seq != 3 {
		t.Errorf("rate.enqueued at dt=0 = %v (seq %d)", got, third.Seq)
	}
}

// TestShutdownEndsLongPolls: a client waiting for a sample does not hold
// up Shutdown (were it to, the poll below would wait an hour).
func TestShutdownEndsLongPolls(t *testing.T) {
	defer func(d time.Duration) { maxWait = d }(maxWait)
	maxWait = time.Hour
	m := stage.NewManager(stage.Options{})
	p, err := New(m, Config{HTTP: "127.0.0.1:0", Interval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + p.Addr().String() + MetricsPath + "?after=99")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	for p.polls.Load() == 0 { // until the request waits in the handler
		time.Sleep(time.Millisecond)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting client got %v, want the latest sample", err)
	}
}
