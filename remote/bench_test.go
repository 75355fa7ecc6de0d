package remote_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// counter is a handler that counts events.
type counter struct{ n atomic.Int64 }

func (c *counter) HandleEvents(batch []sink.Event) error {
	c.n.Add(int64(len(batch)))
	return nil
}

const benchGraph = `
global:
  cluster: {node: a}
  batching: {max: 1000}
stages:
  Work:
    handler: t.Work
    nodes: [b]
    remote: {mode: %s, timeout: 10s}
`

type small struct {
	ID   int    `json:"id"`
	Kind string `json:"k"`
}

// tiny is small with a binary encoding of its own
// (encoding.BinaryMarshaler, and BinaryAppender: remote sinks and the
// plain reference alike encode it into a buffer they reuse).
type tiny struct {
	ID   uint32
	Kind byte
}

func (t tiny) MarshalBinary() ([]byte, error) { return t.AppendBinary(make([]byte, 0, 5)) }

func (t tiny) AppendBinary(b []byte) ([]byte, error) {
	return append(b, byte(t.ID>>24), byte(t.ID>>16), byte(t.ID>>8), byte(t.ID), t.Kind), nil
}

func (t *tiny) UnmarshalBinary(b []byte) error {
	if len(b) != 5 {
		return fmt.Errorf("tiny: %d bytes", len(b))
	}
	t.ID, t.Kind = uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]), b[4]
	return nil
}

func init() {
	remote.Register[small](testCodecs, "bench.small")
	remote.Register[tiny](testCodecs, "bench.tiny")
}

// benchNodes starts node a (embedding the server, in-process) and node b
// (over loopback TCP) hosting Work.
func benchNodes(b testing.TB, mode string) (sink.Sink, *counter, *remote.Node) {
	work := &counter{}
	graph := fmt.Sprintf(benchGraph, mode)
	// The default heartbeat, not the tests' fast one.
	c := &cluster{t: b, tune: func(cc *remote.ClusterConfig) { cc.Heartbeat = 0 }}
	ma, na := c.node(graph, "a", map[string]stage.Handler{"Work": &counter{}})
	c.node(graph, "b", map[string]stage.Handler{"Work": work})
	s, _ := ma.RemoteSink("Work")
	// wait for the replica's heartbeat
	for s.Len() == 0 && s.Enqueue(small{}) != nil {
		time.Sleep(time.Millisecond)
	}
	for work.n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	work.n.Store(0)
	return s, work, na
}

func waitCount(c *counter, n int64) {
	for c.n.Load() < n {
		time.Sleep(50 * time.Microsecond)
	}
}

// decodeSmall and decodeTiny are the reference subscriber's decoding.
func decodeSmall(data []byte) {
	var e small
	_ = json.Unmarshal(data, &e)
}

func decodeTiny(data []byte) {
	var e tiny
	_ = e.UnmarshalBinary(data)
}

// plainConn connects a plain nats.go client to the server node n embeds,
// closed when the benchmark ends.
func plainConn(b testing.TB, n *remote.Node) *nats.Conn {
	nc, err := nats.Connect(n.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// plainSubscriber is the reference's queue subscriber on subj: it
// decodes every message and counts it.
func plainSubscriber(b testing.TB, nc *nats.Conn, subj string, decode func([]byte)) *counter {
	got := &counter{}
	plainQueueSubscribe(b, nc, subj, func(m *nats.Msg) {
		decode(m.Data)
		got.n.Add(1)
	})
	return got
}

// plainResponder answers every request on subj at once, after decoding
// the 5-byte binary events it carries (counted), with a one-byte verdict.
func plainResponder(b testing.TB, nc *nats.Conn, subj string) *counter {
	got := &counter{}
	verdict := []byte{0}
	plainQueueSubscribe(b, nc, subj, func(m *nats.Msg) {
		for d := m.Data; len(d) >= 5; d = d[5:] {
			decodeTiny(d[:5])
			got.n.Add(1)
		}
		_ = m.Respond(verdict)
	})
	return got
}

// plainQueueSubscribe subscribes handle to subj in queue group "q", with
// no pending limits, and waits until the server has the subscription.
func plainQueueSubscribe(b testing.TB, nc *nats.Conn, subj string, handle nats.MsgHandler) {
	sub, err := nc.QueueSubscribe(subj, "q", handle)
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
}

// Event makers for the benchmarks: small is JSON-encoded, tiny binary.
func smallEvent(i int) sink.Event { return small{ID: i, Kind: "x"} }

func tinyEvent(i int) sink.Event { return tiny{ID: uint32(i), Kind: 'x'} }

func appendSmallJSON(_ []byte, i int) []byte {
	data, _ := json.Marshal(small{ID: i, Kind: "x"})
	return data
}

func appendTinyBinary(buf []byte, i int) []byte {
	data, _ := tiny{ID: uint32(i), Kind: 'x'}.AppendBinary(buf[:0])
	return data
}

// benchPlainNATS publishes b.N events encoded by encode from the embedding
// node's in-process connection to a queue subscriber decoding them.
func benchPlainNATS(b *testing.B, encode func(buf []byte, i int) []byte, decode func([]byte)) {
	_, _, na := benchNodes(b, "request")
	nc := plainConn(b, na)
	got := plainSubscriber(b, nc, "plain", decode)
	pub := na.Conn()
	b.ReportAllocs()
	b.ResetTimer()
	var data []byte
	for i := range b.N {
		data = encode(data, i)
		if err := pub.Publish("plain", data); err != nil {
			b.Fatal(err)
		}
	}
	waitCount(got, int64(b.N))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// benchEnqueueParallel enqueues b.N events made by event, one at a time
// and each waiting for its verdict, from parallelism*GOMAXPROCS senders,
// and waits until Work has handled them all.
func benchEnqueueParallel(b *testing.B, s sink.Sink, work *counter, parallelism int, event func(i int) sink.Event) {
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	var id atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Enqueue(event(int(id.Add(1)))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	waitCount(work, int64(b.N))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// benchEnqueueMany enqueues b.N events made by event in batches of 100,
// one message and one verdict per batch, from 4*GOMAXPROCS senders.
func benchEnqueueMany(b *testing.B, s sink.Sink, work *counter, event func(i int) sink.Event) {
	const batch = 100
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	var sent atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		es := make([]sink.Event, 0, batch)
		flush := func() {
			if len(es) == 0 {
				return
			}
			if err := s.EnqueueMany(es); err != nil {
				b.Error(err)
			}
			sent.Add(int64(len(es)))
			es = es[:0]
		}
		i := 0
		for pb.Next() {
			i++
			es = append(es, event(i))
			if len(es) == batch {
				flush()
			}
		}
		flush()
	})
	waitCount(work, sent.Load())
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// reportRoundTrip reports the p50 and p99 verdict round trip of s.
func reportRoundTrip(b *testing.B, s sink.Sink) {
	p50, p99, _ := remote.RoundTrip(s)
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
}

// BenchmarkPlainNATS is the reference: a nats.go publisher (the embedding
// node's in-process connection) to a queue subscriber (over loopback TCP)
// moving the same JSON-encoded events.
func BenchmarkPlainNATS(b *testing.B) {
	benchPlainNATS(b, appendSmallJSON, decodeSmall)
}

// BenchmarkRemoteEnqueue: Enqueue of one small event at a time, each
// waiting for its verdict, from 64 concurrent senders.
func BenchmarkRemoteEnqueue(b *testing.B) {
	s, work, _ := benchNodes(b, "request")
	benchEnqueueParallel(b, s, work, 32, smallEvent)
	reportRoundTrip(b, s)
	st, _ := remote.Stats(s)
	b.ReportMetric(float64(st.Events)/float64(st.Sent), "events/request")
}

// BenchmarkRemoteEnqueueSerial: one sender, one verdict at a time: the
// verdict latency.
func BenchmarkRemoteEnqueueSerial(b *testing.B) {
	s, work, _ := benchNodes(b, "request")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := s.Enqueue(smallEvent(i)); err != nil {
			b.Fatal(err)
		}
	}
	waitCount(work, int64(b.N))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	reportRoundTrip(b, s)
}

// BenchmarkRemoteEnqueueMany: batches of 100 small events, one message
// and one verdict per batch, from 8 concurrent senders.
func BenchmarkRemoteEnqueueMany(b *testing.B) {
	s, work, _ := benchNodes(b, "request")
	benchEnqueueMany(b, s, work, smallEvent)
	reportRoundTrip(b, s)
}

// BenchmarkDurableEnqueue: durable-mode Enqueue (a JetStream publish
// acknowledged by the stream) from 32 concurrent senders, until handled.
func BenchmarkDurableEnqueue(b *testing.B) {
	s, work, _ := benchNodes(b, "durable")
	benchEnqueueParallel(b, s, work, 16, func(int) sink.Event { return small{ID: 1, Kind: "x"} })
}

// BenchmarkPlainNATSBinary is BenchmarkPlainNATS with tiny's binary
// encoding: the reference for the *Binary benchmarks.
func BenchmarkPlainNATSBinary(b *testing.B) {
	benchPlainNATS(b, appendTinyBinary, decodeTiny)
}

// BenchmarkRemoteEnqueueBinary is BenchmarkRemoteEnqueue with tiny events.
func BenchmarkRemoteEnqueueBinary(b *testing.B) {
	s, work, _ := benchNodes(b, "request")
	benchEnqueueParallel(b, s, work, 32, tinyEvent)
}

// BenchmarkRemoteEnqueueManyBinary is BenchmarkRemoteEnqueueMany with
// tiny events.
func BenchmarkRemoteEnqueueManyBinary(b *testing.B) {
	s, work, _ := benchNodes(b, "request")
	benchEnqueueMany(b, s, work, tinyEvent)
	reportRoundTrip(b, s)
}
