package remote_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Two nodes of one graph in one process: node "front" embeds the NATS
// server and sends to Upper, which only node "worker" hosts.
func ExampleNewManager() {
	const graph = `
global:
  cluster: {node: front, listen: "127.0.0.1:0"}
stages:
  Upper:
    handler: example.Upper
    nodes: [worker]
    queue: {threshold: 100}
    remote: {mode: request, timeout: 2s}
`
	cfg, err := stage.ParseConfig([]byte(graph), "graph.yaml")
	if err != nil {
		panic(err)
	}
	done := make(chan string, 1)
	reg := stage.NewRegistry()
	reg.Register("example.Upper", func() stage.Handler {
		return stage.HandlerFunc(func(batch []sink.Event) error {
			for _, e := range batch {
				done <- fmt.Sprintf("worker got %q", e)
			}
			return nil
		})
	})

	front, fnode, err := remote.NewManager(cfg, reg, stage.Options{}, remote.Options{}, nil)
	if err != nil {
		panic(err)
	}
	defer fnode.Close()
	worker, wnode, err := remote.NewManager(cfg, reg, stage.Options{}, remote.Options{}, func(cc *remote.ClusterConfig) {
		cc.Node, cc.NATS = "worker", fnode.URL() // join the front's server
	})
	if err != nil {
		panic(err)
	}
	defer wnode.Close()
	ctx := context.Background()
	_ = front.Start(ctx)
	_ = worker.Start(ctx)
	defer front.Shutdown(ctx)
	defer worker.Shutdown(ctx)

	upper, _ := front.RemoteSink("Upper")
	fmt.Println("enqueue:", upper.Enqueue("hello"))
	fmt.Println(<-done)
	err = upper.Enqueue(struct{}{}) // no codec for this type
	fmt.Println("rejected:", errors.Is(err, sink.ErrRejected), "no codec:", errors.Is(err, remote.ErrNoCodec))
	// Output:
	// enqueue: <nil>
	// worker got "hello"
	// rejected: true no codec: true
}
