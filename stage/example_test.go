package stage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// upper turns strings to upper case and passes them on to the stage named
// in its args.
type upper struct {
	Args struct {
		Next string `yaml:"next"`
	}
	next sink.Sink
}

func (u *upper) Init(c *stage.Context) error {
	if err := c.DecodeArgs(&u.Args); err != nil {
		return err
	}
	var err error
	u.next, err = c.Sink(u.Args.Next)
	return err
}

func (u *upper) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		if err := u.next.Enqueue(strings.ToUpper(e.(string))); err != nil {
			return err // a rejection is a failure the runtime counts and reports
		}
	}
	return nil
}

// printer prints what it gets, one event at a time, in order.
type printer struct{ wg *sync.WaitGroup }

func (printer) SingleThreaded() {}
func (p printer) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		fmt.Println(e)
		p.wg.Done()
	}
	return nil
}

// Example wires a two-stage graph in YAML: handlers are looked up by their
// registry names, and each stage gets its own queue, predicate and pool.
func Example() {
	var wg sync.WaitGroup
	reg := stage.NewRegistry()
	reg.Register("example.Upper", func() stage.Handler { return &upper{} })
	reg.Register("example.Print", func() stage.Handler { return printer{wg: &wg} })

	m, err := stage.Parse([]byte(`
global:
  threadpool: {min: 1, max: 4, controller: {enabled: true, interval: 1s, queueThreshold: 100}}
stages:
  Upper:
    handler: example.Upper
    queue: {threshold: 1000}
    predicate: {type: rate, rate: 5000, depth: 100}
    args: {next: Print}
  Print:
    handler: example.Print
`), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	in, _ := m.Stage("Upper")
	wg.Add(1)
	if err := in.Sink().Enqueue("hello, stages"); err != nil {
		fmt.Println("rejected:", err)
	}
	wg.Wait()
	_ = m.Shutdown(context.Background())
	for _, e := range m.Edges() {
		fmt.Printf("%q -> %q: %d\n", e.From, e.To, e.Count)
	}
	// Output:
	// HELLO, STAGES
	// "" -> "Upper": 1
	// "Upper" -> "Print": 1
}

// ExampleManager_CreateStage builds a stage from Go, guards it with a
// predicate and reacts to the rejection.
func ExampleManager_CreateStage() {
	m := stage.NewManager(stage.Options{})
	st, _ := m.CreateStage("Guarded", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{
		Queue: stage.QueueConfig{Threshold: 1},
	})
	// not started: events wait in the queue, and the second one finds it full
	fmt.Println(st.Sink().Enqueue(1))
	fmt.Println(st.Sink().Enqueue(2))
	_ = m.Start(context.Background())
	_ = m.Shutdown(context.Background())
	fmt.Println(st.Stats().Events, "handled,", st.Stats().RejectedFull, "rejected")
	// Output:
	// <nil>
	// sink "Guarded": enqueue rejected: queue full
	// 1 handled, 1 rejected
}

// Ready is a readiness probe's answer: nil only while the manager runs.
func ExampleManager_Ready() {
	m := stage.NewManager(stage.Options{})
	fmt.Println(m.Ready())
	_ = m.Start(context.Background())
	fmt.Println(m.Ready())
	_ = m.Shutdown(context.Background())
	fmt.Println(errors.Is(m.Ready(), stage.ErrNotReady), m.Ready())
	// Output:
	// stage: manager not ready: not started
	// <nil>
	// true stage: manager not ready: stopped
}
