package http_test

import (
	"bufio"
	"io"
	"net"
	nethttp "net/http"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
)

// TestConnectionSinktest runs the sink conformance suite on an HTTP
// connection over a real loopback socket. The client pipelines enough
// requests up front; the suite's i-th event is a *Reply answering the
// i-th of them with body i, and consuming it is reading that response at
// the client. A reply the connection refuses (its Done gets the error)
// is answered 503 with Reject instead, so that the responses after it
// are not held up: the client skips those.
func TestConnectionSinktest(t *testing.T) {
	const requests = 1200
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		reqs, client := inlineServer(t, http.ServerConfig{MaxPipeline: 2 * requests}, requests)
		var pipeline []byte
		for range requests {
			pipeline = append(pipeline, "GET /r HTTP/1.1\r\nHost: sinktest\r\n\r\n"...)
		}
		if _, err := client.Write(pipeline); err != nil {
			t.Fatal(err)
		}
		ev := newReplyEvents(t, reqs)
		br := bufio.NewReader(client)
		return sinktest.Harness{
			Sink:  ev.conn,
			Event: ev.event,
			Consume: func() (sink.Event, bool) {
				_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
				for {
					resp, err := nethttp.ReadResponse(br, nil)
					if err != nil {
						t.Logf("sinktest harness: reading a response: %v", err)
						return nil, false
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						return nil, false
					}
					if resp.StatusCode == nethttp.StatusServiceUnavailable {
						continue // a refused reply's stand-in
					}
					return ev.answered(body)
				}
			},
			Close: func() {
				closeAndWait(t, ev.conn, func() {
					_ = client.(*net.TCPConn).CloseWrite() // end a lingering close
				})
			},
			Limit: counterLimit,
		}
	})
}

// TestConnectionAdmissionCloseCancels: replies a concurrency limit
// admitted are given back when the connection closes with them unsent:
// one waiting for an earlier answer, and large ones the client never
// reads.
func TestConnectionAdmissionCloseCancels(t *testing.T) {
	reqs, client := inlineServer(t, http.ServerConfig{}, 8)
	const n = 4
	for range n {
		if _, err := client.Write([]byte("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	var got []*http.Request
	for range n {
		select {
		case r := <-reqs:
			got = append(got, r)
		case <-time.After(10 * time.Second):
			t.Fatal("no request")
		}
	}
	conn := got[0].Conn.(*http.Connection)
	limit := enqueuepred.NewCounter(100)
	conn.SetPredicate(limit)
	body := make([]byte, 8<<20)
	// The last request's answer waits for the earlier ones; the first
	// ones are too large for the client's socket buffers.
	for _, r := range []*http.Request{got[n-1], got[0], got[1]} {
		if err := conn.Enqueue(http.Reply{Req: r, Resp: http.OK("application/octet-stream", body)}); err != nil {
			t.Fatal(err)
		}
	}
	if limit.(interface{ InFlight() int }).InFlight() != 3 {
		t.Fatalf("in flight %d, want 3", limit.(interface{ InFlight() int }).InFlight())
	}
	_ = conn.Abort()
	deadline := time.Now().Add(10 * time.Second)
	for limit.(interface{ InFlight() int }).InFlight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d replies still hold credit after the connection closed", limit.(interface{ InFlight() int }).InFlight())
		}
		time.Sleep(time.Millisecond)
	}
}
