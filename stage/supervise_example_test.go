package stage_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ExampleManager_CreateSupervised supervises a stage created from Go: its
// handler is remade by the factory after a failure (RestartOn error: a
// returned error counts, not only a panic), events queued behind
// the failure reach the new handler, and a monitor hears of everything.
// The second failure exceeds the intensity (one restart a minute): the
// supervisor, a root, gives up and (OnGiveUp stop) the manager stops.
func ExampleManager_CreateSupervised() {
	m := stage.NewManager(stage.Options{})
	instances := 0
	factory := func() stage.Handler {
		instances++
		id := instances
		return stage.HandlerFunc(func(batch []sink.Event) error {
			if batch[0] == "crash" {
				return errors.New("crashed")
			}
			fmt.Printf("handler %d: %v\n", id, batch[0])
			return nil
		})
	}
	st, err := m.CreateSupervised("Worker", factory, stage.StageConfig{
		Batching:   stage.BatchingConfig{Max: 1},
		Supervisor: &stage.SupervisorConfig{MaxRestarts: 1, Period: time.Minute, RestartOn: stage.RestartOnError, OnGiveUp: stage.GiveUpStop},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	monitor := sink.NewQueue(0)
	if _, err := m.Monitor("Worker", monitor); err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range []string{"hello", "crash", "again", "crash"} {
		_ = st.Sink().Enqueue(e)
	}
	<-m.Done()
	fmt.Println("stopped:", m.Err())
	for _, e := range monitor.Discard() {
		switch e := e.(type) {
		case stage.StageFailed:
			fmt.Printf("failed: handler %d: %v\n", e.Instance, e.Err)
		case stage.StageRestarted:
			fmt.Printf("restarted: handler %d\n", e.Instance)
		case stage.StageTerminated:
			fmt.Printf("terminated: %s\n", e.Reason)
		}
	}
	// Output:
	// handler 1: hello
	// handler 2: again
	// stopped: stage: supervisor gave up: root supervisor "Worker": crashed
	// failed: handler 1: crashed
	// restarted: handler 2
	// failed: handler 2: crashed
	// terminated: gave up
}

// ExampleSchedulerConfig serves a backlog newest first.
func ExampleSchedulerConfig() {
	reg := stage.NewRegistry()
	reg.Register("example.Lines", func() stage.Handler { return lines{} })
	m, err := stage.Parse([]byte(`
stages:
  Latest:
    handler: example.Lines
    scheduler: lifo
    batching: {max: 2}
`), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := m.Stage("Latest")
	for i := 1; i <= 5; i++ { // queued before the stage starts
		_ = st.Sink().Enqueue(fmt.Sprint("request ", i))
	}
	_ = m.Start(context.Background())
	_ = m.Shutdown(context.Background())
	// Output:
	// request 5
	// request 4
	// request 3
	// request 2
	// request 1
}

// lines prints its events, one goroutine at a time.
type lines struct{}

func (lines) SingleThreaded() {}
func (lines) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		fmt.Println(e)
	}
	return nil
}

// ExampleSupervisorConfig_backoff: only crash loops back off (a restarted
// handler that fails before it has handled anything); `backoff: off` (or
// an explicit 0) restarts even those at once, and a negative duration is
// an error at its line.
func ExampleSupervisorConfig_backoff() {
	cfg, err := stage.ParseConfig([]byte(`
stages:
  Parser:   # crash loops wait about 10ms, 20ms, 40ms ... up to 1s
    handler: parse
    supervisor: {maxRestarts: 100, period: 1m}
  Cache:
    handler: cache
    supervisor: {maxRestarts: 100, period: 1m, backoff: off}
`), "app.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range cfg.Stages {
		fmt.Println(s.Name, "backoff off:", s.Config.Supervisor.Backoff == stage.NoBackoff)
	}
	_, err = stage.ParseConfig([]byte("stages:\n  Cache:\n    handler: cache\n    supervisor: {backoff: -1s}\n"), "app.yaml")
	fmt.Println(err)
	// Output:
	// Parser backoff off: false
	// Cache backoff off: true
	// app.yaml: line 4: stages.Cache.supervisor.backoff: negative duration -1s (write off to turn backoff off)
}
