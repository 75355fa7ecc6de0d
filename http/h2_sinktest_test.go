package http_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
)

// TestH2ConnectionSinktest runs the sink conformance suite on an HTTP/2
// connection: the client opens enough streams up front; the suite's i-th
// event is a *Reply answering the i-th of them with body i, and
// consuming it is reading that stream's response. A reply the connection
// refuses is answered 503 with Reject instead; the client skips those.
func TestH2ConnectionSinktest(t *testing.T) {
	const requests = 1200
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		cfg := http.ServerConfig{HTTP2: http.H2Config{MaxConcurrentStreams: 2 * requests, MaxResetsPerSecond: 1 << 20}}
		reqs, client := inlineServer(t, cfg, requests)
		raw := h2test.On(t, client)
		for id := uint32(1); id < 2*requests; id += 2 {
			if err := raw.Get(id, "/r"); err != nil {
				t.Fatal(err)
			}
		}
		ev := newReplyEvents(t, reqs)
		bodies := map[uint32][]byte{}
		status := map[uint32]string{}
		return sinktest.Harness{
			Sink:  ev.conn,
			Event: ev.event,
			Consume: func() (sink.Event, bool) {
				_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
				for {
					f, err := raw.Framer.ReadFrame()
					if err != nil {
						t.Logf("sinktest harness: reading a frame: %v", err)
						return nil, false
					}
					switch f := f.(type) {
					case *http2.MetaHeadersFrame:
						status[f.StreamID] = f.PseudoValue("status")
						continue
					case *http2.DataFrame:
						bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
						if n := uint32(len(f.Data())); n > 0 {
							_ = raw.Framer.WriteWindowUpdate(0, n)
						}
						if !f.StreamEnded() {
							continue
						}
						body, code := bodies[f.StreamID], status[f.StreamID]
						delete(bodies, f.StreamID)
						delete(status, f.StreamID)
						if code == "503" {
							continue // a refused reply's stand-in
						}
						return ev.answered(body)
					}
				}
			},
			Close: func() { closeAndWait(t, ev.conn) },
			Limit: counterLimit,
		}
	})
}

// replyEvents are the events of a connection's sinktest harness: the
// i-th is a *Reply answering the connection's next request with body i;
// a reply the connection refuses (its Done gets the error) is answered
// 503 with Reject instead, so that the responses after it are not held
// up (the client skips those).
type replyEvents struct {
	t       *testing.T
	conn    *http.Connection
	reqs    <-chan *http.Request
	pending []*http.Request
	mu      sync.Mutex
	evs     map[int]*http.Reply
}

func newReplyEvents(t *testing.T, reqs <-chan *http.Request) *replyEvents {
	e := &replyEvents{t: t, reqs: reqs, evs: map[int]*http.Reply{}}
	first := e.next()
	e.conn = first.Conn.(*http.Connection)
	e.pending = []*http.Request{first}
	return e
}

func (e *replyEvents) next() *http.Request {
	select {
	case r := <-e.reqs:
		return r
	case <-time.After(10 * time.Second):
		e.t.Fatal("sinktest harness: the server delivered no request")
		return nil
	}
}

func (e *replyEvents) event(i int) sink.Event {
	var req *http.Request
	if len(e.pending) > 0 {
		req, e.pending = e.pending[0], e.pending[1:]
	} else {
		req = e.next()
	}
	r := &http.Reply{Req: req, Resp: http.OK("text/plain", []byte(strconv.Itoa(i)))}
	r.Done = func(err error) {
		if err != nil && !errors.Is(err, sink.ErrClosed) {
			_ = e.conn.Reject(req, 0) // refused: answer 503 in its place
		}
	}
	e.mu.Lock()
	e.evs[i] = r
	e.mu.Unlock()
	return r
}

// answered returns the event whose response had body.
func (e *replyEvents) answered(body []byte) (sink.Event, bool) {
	i, err := strconv.Atoi(string(body))
	if err != nil {
		e.t.Errorf("sinktest harness: response %q", body)
		return nil, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evs[i], true
}

// closeAndWait closes conn and waits until it has closed.
func closeAndWait(t *testing.T, conn *http.Connection, then ...func()) {
	_ = conn.Close()
	for _, f := range then {
		f()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !conn.Closed() {
		if time.Now().After(deadline) {
			t.Fatal("sinktest harness: the connection did not close")
		}
		time.Sleep(time.Millisecond)
	}
}

// counterLimit is a harness's Limit: enqueuepred's concurrency counter.
func counterLimit(limit int) (sink.Predicate, func() int) {
	p := enqueuepred.NewCounter(limit)
	return p, p.(interface{ InFlight() int }).InFlight
}
