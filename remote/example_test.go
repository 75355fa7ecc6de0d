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

// letter is an event that belongs to one process: the inbox it is for.
type letter struct {
	To   string `json:"to"` // a Node.Instance
	Text string `json:"text"`
}

// Two processes host Inbox; SetHome sends each letter to the one it is
// addressed to, whatever their loads (as Haboob sends a worker's reply to
// the front that holds the client's connection).
func ExampleSetHome() {
	const graph = `
global:
  cluster: {node: post, listen: "127.0.0.1:0"}
stages:
  Inbox:
    handler: example.Inbox
    nodes: [inbox]
`
	codecs := remote.NewCodecs()
	remote.Register[letter](codecs, "example.letter")
	remote.SetHome(codecs, func(l letter) string { return l.To })

	cfg, err := stage.ParseConfig([]byte(graph), "graph.yaml")
	if err != nil {
		panic(err)
	}
	got := make(chan string, 1)
	start := func(name, url string) (*stage.Manager, *remote.Node) {
		reg := stage.NewRegistry()
		var self *remote.Node
		reg.Register("example.Inbox", func() stage.Handler {
			return stage.HandlerFunc(func(batch []sink.Event) error {
				for _, e := range batch {
					l := e.(letter)
					got <- fmt.Sprintf("%q reached its inbox: %v", l.Text, l.To == self.Instance())
				}
				return nil
			})
		})
		m, n, err := remote.NewManager(cfg, reg, stage.Options{}, remote.Options{Codecs: codecs}, func(cc *remote.ClusterConfig) {
			cc.Node, cc.NATS = name, url
		})
		if err != nil {
			panic(err)
		}
		self = n
		if err := m.Start(context.Background()); err != nil {
			panic(err)
		}
		return m, n
	}
	post, pnode := start("post", "")
	defer pnode.Close()
	defer post.Shutdown(context.Background())
	m1, inbox1 := start("inbox", pnode.URL())
	defer inbox1.Close()
	defer m1.Shutdown(context.Background())
	m2, inbox2 := start("inbox", pnode.URL())
	defer inbox2.Close()
	defer m2.Shutdown(context.Background())

	s, _ := post.RemoteSink("Inbox")
	for _, to := range []*remote.Node{inbox2, inbox1} {
		if err := s.Enqueue(letter{To: to.Instance(), Text: "hello " + to.Name()}); err != nil {
			panic(err)
		}
		fmt.Println(<-got)
	}
	// Output:
	// "hello inbox" reached its inbox: true
	// "hello inbox" reached its inbox: true
}

// A node refuses a message of a wire version newer than its own with an
// error naming both versions, which the sender's Enqueue returns inside
// its rejection.
func ExampleVersionError() {
	err := &remote.VersionError{Got: remote.WireVersion + 1}
	fmt.Println(err)
	// Output: remote: message in wire format version 3, this node speaks versions 1 to 2 (built before it: upgrade this node)
}

// A Commit that no verdict confirmed: ErrOutcomeUnknown says the replica
// may have kept the events (do not send them again blindly); any other
// error says they were not kept.
func ExampleErrOutcomeUnknown() {
	commit := func(work sink.Sink, batch []sink.Event) string {
		txn, err := work.Prepare(batch)
		if err != nil {
			return "not prepared: " + err.Error()
		}
		txn.Commit()
		var txnErr error
		if e, ok := txn.(interface{ Err() error }); ok {
			txnErr = e.Err()
		}
		switch {
		case txnErr == nil:
			return "kept"
		case errors.Is(txnErr, remote.ErrOutcomeUnknown):
			return "may have been kept: reconcile before sending again"
		default:
			return "not kept: safe to send again"
		}
	}
	// A remote stage's sink (NewManager, Node.StageSink) may answer any
	// of the three; a local queue's transactions are always kept.
	fmt.Println(commit(sink.NewQueue(0), []sink.Event{"a", "b"}))
	// Output: kept
}
