package aio

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// waitLimit bounds every wait in these tests. It only turns a hang into a
// failure; no test passes or fails on how fast something happens.
const waitLimit = 30 * time.Second

// recorder is a sink that records events in arrival order. reject, if set,
// refuses events it returns true for.
type recorder struct {
	name   string
	mu     sync.Mutex
	evs    []sink.Event
	ch     chan struct{}
	reject func(sink.Event) bool
	on     func(sink.Event) // called for every accepted event, in Enqueue
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, ch: make(chan struct{}, 1)}
}

func (r *recorder) Enqueue(e sink.Event) error {
	r.mu.Lock()
	if r.reject != nil && r.reject(e) {
		r.mu.Unlock()
		return &sink.RejectError{Sink: r.name, Reason: "test rejects"}
	}
	r.evs = append(r.evs, e)
	on := r.on
	r.mu.Unlock()
	if on != nil {
		on(e)
	}
	select {
	case r.ch <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) EnqueueMany(es []sink.Event) error {
	for _, e := range es {
		if err := r.Enqueue(e); err != nil {
			return err
		}
	}
	return nil
}
func (r *recorder) EnqueueLossy(e sink.Event) bool { return r.Enqueue(e) == nil }
func (r *recorder) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, fmt.Errorf("%w: recorder has no transactions", sink.ErrRejected)
}
func (r *recorder) Len() int                    { return 0 }
func (r *recorder) SetPredicate(sink.Predicate) {}
func (r *recorder) Predicate() sink.Predicate   { return nil }
func (r *recorder) String() string              { return "recorder " + r.name }

func (r *recorder) setReject(f func(sink.Event) bool) {
	r.mu.Lock()
	r.reject = f
	r.mu.Unlock()
}

func (r *recorder) events() []sink.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sink.Event(nil), r.evs...)
}

// wait blocks until cond holds for the recorded events.
func (r *recorder) wait(t testing.TB, what string, cond func([]sink.Event) bool) []sink.Event {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		evs := r.events()
		if cond(evs) {
			return evs
		}
		select {
		case <-r.ch:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: gave up waiting for %s; have %d events: %s", r.name, what, len(evs), summarize(evs))
		}
	}
}

func summarize(evs []sink.Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i == 20 {
			fmt.Fprintf(&b, " …(%d more)", len(evs)-20)
			break
		}
		fmt.Fprintf(&b, " %T", e)
		if sc, ok := e.(SinkClosed); ok {
			fmt.Fprintf(&b, "{%s %v}", sc.Reason, sc.Err)
		}
	}
	return b.String()
}

func count[T any](evs []sink.Event) int {
	n := 0
	for _, e := range evs {
		if _, ok := e.(T); ok {
			n++
		}
	}
	return n
}

func first[T any](evs []sink.Event) (T, bool) {
	for _, e := range evs {
		if v, ok := e.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// packetBytes concatenates the packets in evs and checks their sequence
// numbers run 1, 2, 3….
func packetBytes(t testing.TB, evs []sink.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	var seq uint64
	for _, e := range evs {
		if p, ok := e.(Packet); ok {
			seq++
			if p.Seq != seq {
				t.Fatalf("packet seq %d, want %d", p.Seq, seq)
			}
			b.Write(p.Data)
		}
	}
	return b.Bytes()
}

// fnSink adapts a function to a sink (for inline handlers in tests).
type fnSink func(sink.Event) error

func (f fnSink) Enqueue(e sink.Event) error { return f(e) }
func (f fnSink) EnqueueMany(es []sink.Event) error {
	for _, e := range es {
		if err := f(e); err != nil {
			return err
		}
	}
	return nil
}
func (f fnSink) EnqueueLossy(e sink.Event) bool { return f(e) == nil }
func (f fnSink) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, fmt.Errorf("%w: no transactions", sink.ErrRejected)
}
func (f fnSink) Len() int                    { return 0 }
func (f fnSink) SetPredicate(sink.Predicate) {}
func (f fnSink) Predicate() sink.Predicate   { return nil }

// checkLeaks fails the test if goroutines started during it are still
// running when it ends (after waiting for them to wind down).
func checkLeaks(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(waitLimit)
		for {
			n := runtime.NumGoroutine()
			if n <= base {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d running, %d before the test\n%s", n, base, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// listen starts a loopback server for a test and closes it at the end.
func listen(t *testing.T, cfg SocketConfig, s sink.Sink, env ...Env) *Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	var e Env
	if len(env) > 0 {
		e = env[0]
	}
	srv, err := Listen(cfg, s, e)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

func dial(t testing.TB, srv *Server) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", srv.Addr().String(), waitLimit)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// pattern is n deterministic bytes that differ per seed.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed*2654435761 + 1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// waitCond polls cond until it holds.
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func ctxTimeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}
