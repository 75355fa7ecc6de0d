package remote_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/internal/logbuf"
	"github.com/sandstorm-go/sandstorm/internal/natstest"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// boundGraph: node w sends to Inbox (hosted by the front nodes f) and
// to Work (hosted by node b); timeout is the stages' remote timeout.
const boundGraph = `
global:
  cluster: {node: w}
stages:
  Inbox:
    handler: t.Inbox
    nodes: [f]
    remote: {mode: request, timeout: %[1]s}
  Work:
    handler: t.Work
    nodes: [b]
    remote: {mode: request, timeout: %[1]s}
`

// hangGuard bounds a wait that must end; it is no criterion.
const hangGuard = 60 * time.Second

// sinkStats returns a remote sink's counters.
func sinkStats(t *testing.T, s sink.Sink) remote.SinkStats {
	t.Helper()
	st, ok := remote.Stats(s)
	if !ok {
		t.Fatalf("%v is not a remote sink", s)
	}
	return st
}

// TestReplyWaitsForItsHome: a reply (an event with a home) whose home's
// node is cut off from NATS while the replying node's link is up waits
// for its home, resent with the same key, and is admitted there once;
// it never goes to another front. A home that does not come back within
// the stage's timeout gets the reply rejected then, counted and logged.
func TestReplyWaitsForItsHome(t *testing.T) {
	tests := []struct {
		name      string
		timeout   string
		otherHome bool // a second front hosts Inbox too
		outFirst  bool // the home is taken out of rotation before the reply is made
		heal      bool // the home's link comes back
	}{
		{name: "home cut off briefly, no other front", timeout: "30s", heal: true},
		{name: "home cut off briefly, another front up", timeout: "30s", otherHome: true, heal: true},
		{name: "home out of rotation, another front up", timeout: "30s", otherHome: true, outFirst: true, heal: true},
		{name: "home never back: rejected at the timeout", timeout: "1s", otherHome: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logbuf.Buffer{}
			codecs := remote.NewCodecs()
			remote.Register[homed](codecs, "test.homed")
			remote.SetHome(codecs, func(h homed) string { return h.To })
			c := &cluster{t: t, codecs: codecs, log: slog.New(slog.NewTextHandler(logs, nil))}
			graph := fmt.Sprintf(boundGraph, tc.timeout)
			mw, nw := c.node(graph, "w", nil)
			proxy := natstest.NewLink(t, c.url)
			homeInbox, otherInbox := &recorder{}, &recorder{}
			_, home := (&cluster{t: t, url: proxy.URL(), codecs: codecs}).node(graph, "f", map[string]stage.Handler{"Inbox": homeInbox})
			replicas := 1
			if tc.otherHome {
				_, _ = c.node(graph, "f", map[string]stage.Handler{"Inbox": otherInbox})
				replicas = 2
			}
			replies := remoteSink(t, mw, "Inbox")
			waitFor(t, "the fronts in rotation", func() bool { return replies.(interface{ Replicas() int }).Replicas() == replicas })
			if err := replies.Enqueue(homed{To: home.Instance(), N: 1}); err != nil {
				t.Fatal(err)
			}
			proxy.Cut()
			waitFor(t, "the home cut off", func() bool { return !home.Conn().IsConnected() })
			waitFor(t, "the home's subscriptions dropped", func() bool { return unsubscribed(nw, home, "Inbox") })
			if tc.outFirst {
				waitFor(t, "the home out of rotation", func() bool { return replies.(interface{ Replicas() int }).Replicas() == replicas-1 })
			}
			before := sinkStats(t, replies)
			done := make(chan error, 1)
			go func() { done <- replies.Enqueue(homed{To: home.Instance(), N: 2}) }()
			if tc.heal {
				waitFor(t, "the reply waiting for its home", func() bool { return sinkStats(t, replies).Waits > before.Waits })
				proxy.Heal()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(hangGuard):
				t.Fatal("the reply never got its verdict")
			}
			if otherInbox.count() != 0 {
				t.Fatalf("the other front took %v", otherInbox.events())
			}
			if !tc.heal {
				if !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), "not delivered within 1s") {
					t.Fatalf("a reply whose home never came back: %v, want a rejection at the timeout", err)
				}
				if st := sinkStats(t, replies); st.Rejected != before.Rejected+1 {
					t.Fatalf("rejections counted %d, want %d", st.Rejected, before.Rejected+1)
				}
				if !strings.Contains(logs.String(), "reply not delivered in time") {
					t.Fatalf("no WARN line for the reply given up:\n%s", logs.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("a reply whose home came back: %v, want it delivered", err)
			}
			waitFor(t, "the reply handled at its home", func() bool { return homeInbox.count() == 2 })
			if !strings.Contains(logs.String(), "reply waiting for its home") {
				t.Fatalf("no WARN line for the wait:\n%s", logs.String())
			}
			// Admitted once: an event sent after it lands behind it.
			if err := replies.Enqueue(homed{To: home.Instance(), N: 3}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the next reply", func() bool { return homeInbox.count() >= 3 })
			if got := homeInbox.events(); len(got) != 3 || got[1].(homed).N != 2 {
				t.Fatalf("the home handled %v, want the reply once", got)
			}
		})
	}
}

// unsubscribed reports whether the NATS server has dropped the direct
// subscription of node to's replica of stage, asked from node from: a
// request sent before that may reach the dead connection, and would be
// one that may have arrived (see TestCommitOutcome), not undelivered.
func unsubscribed(from, to *remote.Node, stage string) bool {
	_, err := from.Conn().Request(remote.DirectSubject(to, stage), nil, time.Second)
	return errors.Is(err, nats.ErrNoResponders)
}

// outcomes is a sender-side predicate that admits everything and
// records how each event was completed: Done (kept) or Cancel.
type outcomes struct {
	mu              sync.Mutex
	done, cancelled []sink.Event
}

func (o *outcomes) Accept(sink.Event) bool { return true }

func (o *outcomes) Done(e sink.Event, _, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done = append(o.done, e)
}

func (o *outcomes) Cancel(e sink.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cancelled = append(o.cancelled, e)
}

func (o *outcomes) counts() (done, cancelled int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.done), len(o.cancelled)
}

// TestCommitWaitsForItsReplica: a prepared transaction's Commit whose
// replica's node is cut off from NATS waits for that replica (never
// another), resent with the same id, and the events are kept there once;
// a replica that does not come back within the stage's timeout makes
// the Commit a failure the caller sees: its ticket cancelled, the Txn's
// Err, SinkStats.LostOutcomes, a log line.
func TestCommitWaitsForItsReplica(t *testing.T) {
	tests := []struct {
		name         string
		timeout      string
		otherReplica bool // a second replica of Work joins after the Prepare
		heal         bool
	}{
		{name: "replica cut off briefly", timeout: "30s", heal: true},
		{name: "replica cut off briefly, another replica up", timeout: "30s", otherReplica: true, heal: true},
		{name: "replica never back: the commit is lost, and said so", timeout: "1s", otherReplica: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logbuf.Buffer{}
			c := &cluster{t: t, log: slog.New(slog.NewTextHandler(logs, nil))}
			graph := fmt.Sprintf(boundGraph, tc.timeout)
			mw, nw := c.node(graph, "w", nil)
			proxy := natstest.NewLink(t, c.url)
			held, other := &recorder{}, &recorder{}
			_, nb := (&cluster{t: t, url: proxy.URL()}).node(graph, "b", map[string]stage.Handler{"Work": held})
			work := remoteSink(t, mw, "Work")
			waitFor(t, "the replica in rotation", func() bool { return work.(interface{ Replicas() int }).Replicas() == 1 })
			pred := &outcomes{}
			work.SetPredicate(pred)
			txn, err := work.Prepare([]sink.Event{"prepared"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.otherReplica {
				_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": other})
				waitFor(t, "two replicas in rotation", func() bool { return work.(interface{ Replicas() int }).Replicas() == 2 })
			}
			proxy.Cut()
			waitFor(t, "the replica cut off", func() bool { return !nb.Conn().IsConnected() })
			// and its subscriptions gone from the server: a Commit sent
			// before that may reach the dead connection, and its outcome
			// would be unknown (TestCommitOutcome), not lost.
			waitFor(t, "the replica's subscriptions dropped", func() bool { return unsubscribed(nw, nb, "Work") })
			before := sinkStats(t, work)
			committed := make(chan struct{})
			go func() { txn.Commit(); close(committed) }()
			if tc.heal {
				waitFor(t, "the commit waiting for its replica", func() bool { return sinkStats(t, work).Waits > before.Waits })
				proxy.Heal()
			}
			select {
			case <-committed:
			case <-time.After(hangGuard):
				t.Fatal("Commit never returned")
			}
			txnErr := txn.(interface{ Err() error }).Err()
			done, cancelled := pred.counts()
			st := sinkStats(t, work)
			if !tc.heal {
				if txnErr == nil || !errors.Is(txnErr, sink.ErrRejected) {
					t.Fatalf("a commit never delivered: Err() = %v, want a rejection", txnErr)
				}
				if done != 0 || cancelled != 1 {
					t.Fatalf("the ticket got %d Done, %d Cancel; want the event cancelled (Err %v)\n%s", done, cancelled, txnErr, logs.String())
				}
				if st.LostOutcomes != before.LostOutcomes+1 {
					t.Fatalf("LostOutcomes %d, want %d", st.LostOutcomes, before.LostOutcomes+1)
				}
				for name, want := range map[string]uint64{"remote.Work.lostOutcomes": st.LostOutcomes, "remote.Work.waits": st.Waits} {
					g, ok := mw.Metrics().Get(name).(interface{ Value() int64 })
					if !ok || uint64(g.Value()) != want || want == 0 {
						t.Fatalf("metric %s = %v, want %d (> 0)", name, mw.Metrics().Get(name), want)
					}
				}
				if !strings.Contains(logs.String(), "transaction outcome waiting for its replica") ||
					!strings.Contains(logs.String(), "transaction outcome not delivered") {
					t.Fatalf("no log line for the lost commit:\n%s", logs.String())
				}
				if other.count() != 0 {
					t.Fatalf("the other replica took %v", other.events())
				}
				return
			}
			if txnErr != nil || done != 1 || cancelled != 0 || st.LostOutcomes != before.LostOutcomes {
				t.Fatalf("a commit across a brief cut: Err() = %v, %d Done, %d Cancel, LostOutcomes %d; want it kept",
					txnErr, done, cancelled, st.LostOutcomes)
			}
			waitFor(t, "the committed event handled", func() bool { return held.count() == 1 })
			if err := work.Enqueue("after"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the next event", func() bool { return held.count()+other.count() == 2 })
			if got := held.events(); got[0] != "prepared" || other.count() > 1 {
				t.Fatalf("held %v, other %v: want the prepared event once, where it was prepared", got, other.events())
			}
		})
	}
}

// TestHomeAcrossOutage: a reply made while its sender's node is cut off
// from NATS, for longer than the staleness bound (the fronts'
// heartbeats stale when it ends), waits for the link and goes to its
// home once it is back; so does a reply made just after the outage,
// while the sender has not heard the home again: never to the other
// front, each admitted once.
func TestHomeAcrossOutage(t *testing.T) {
	codecs := remote.NewCodecs()
	remote.Register[homed](codecs, "test.homed")
	remote.SetHome(codecs, func(h homed) string { return h.To })
	c := &cluster{t: t, codecs: codecs}
	graph := fmt.Sprintf(boundGraph, "30s")
	homeInbox, otherInbox := &recorder{}, &recorder{}
	_, home := c.node(graph, "f", map[string]stage.Handler{"Inbox": homeInbox})
	_, _ = c.node(graph, "f", map[string]stage.Handler{"Inbox": otherInbox})
	proxy := natstest.NewLink(t, c.url)
	mw, nw := (&cluster{t: t, url: proxy.URL(), codecs: codecs}).node(graph, "w", nil)
	replies := remoteSink(t, mw, "Inbox")
	waitFor(t, "both fronts in rotation", func() bool { return replies.(interface{ Replicas() int }).Replicas() == 2 })
	if err := replies.Enqueue(homed{To: home.Instance(), N: 1}); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	waitFor(t, "node w cut off", func() bool { return !nw.Conn().IsConnected() })
	before := sinkStats(t, replies)
	done := make(chan error, 1)
	go func() { done <- replies.Enqueue(homed{To: home.Instance(), N: 2}) }()
	waitFor(t, "the reply waiting for the link", func() bool { return sinkStats(t, replies).Waits > before.Waits })
	time.Sleep(1200 * time.Millisecond) // the outage outlasts the staleness bound (1s): setup, not a criterion
	proxy.Heal()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a reply made while cut off: %v, want it delivered to its home", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("the reply made while cut off never got its verdict")
	}
	if err := replies.Enqueue(homed{To: home.Instance(), N: 3}); err != nil {
		t.Fatalf("a reply just after the outage: %v, want it delivered to its home", err)
	}
	waitFor(t, "the replies handled at their home", func() bool { return homeInbox.count() == 3 })
	if otherInbox.count() != 0 {
		t.Fatalf("the other front took %v", otherInbox.events())
	}
	for i, e := range homeInbox.events() {
		if e.(homed).N != i+1 {
			t.Fatalf("the home handled %v, want replies 1, 2, 3 once each", homeInbox.events())
		}
	}
}
