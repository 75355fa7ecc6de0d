package stage_test

import (
	"context"
	"fmt"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ExampleManager_Reload changes a running graph: Front's threshold and
// predicate change in place, Audit is drained and removed, Archive is
// created and started. A configuration with errors is refused whole, and
// the graph keeps running as it was.
func ExampleManager_Reload() {
	reg := stage.NewRegistry()
	reg.Register("example.Discard", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { return nil })
	})
	m, err := stage.Parse([]byte(`
stages:
  Front:
    handler: example.Discard
    queue: {threshold: 1000}
  Audit:
    handler: example.Discard
`), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	defer m.Shutdown(context.Background())

	next, err := stage.ParseConfig([]byte(`
stages:
  Front:
    handler: example.Discard
    queue: {threshold: 100}
    predicate: {type: rate, rate: 5000, depth: 100}
  Archive:
    handler: example.Discard
`), "next.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	sum, err := m.Reload(next)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sum)
	front, _ := m.Stage("Front")
	fmt.Println("Front's threshold:", front.Config().Queue.Threshold)

	bad, err := stage.ParseConfig([]byte(`
stages:
  Front:
    handler: example.Discrad
`), "bad.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := m.Reload(bad); err != nil {
		fmt.Println(err)
	}
	fmt.Println("Front's threshold:", front.Config().Queue.Threshold)
	// Output:
	// added Archive; removed Audit; changed Front (queue.threshold, predicate)
	// Front's threshold: 100
	// bad.yaml: line 4: stages.Front.handler: unknown handler "example.Discrad" (did you mean "example.Discard"? or a forgotten import)
	// Front's threshold: 100
}
