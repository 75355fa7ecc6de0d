package http_test

import (
	"bufio"
	"errors"
	"io"
	nethttp "net/http"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// TestAnswer: Connection.Answer sends a Reply value as Send sends a
// *Reply: written in order, its Done called once; a connection's
// admission predicate is handed a *Reply to judge, and a refused answer
// fails with the predicate's error (its Done called with it) and is not
// written.
func TestAnswer(t *testing.T) {
	tests := []struct {
		name      string
		predicate bool // a predicate is installed
		accept    bool // what it answers
	}{
		{"no predicate", false, false},
		{"predicate accepts", true, true},
		{"predicate refuses", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs, client := inlineServer(t, http.ServerConfig{}, 1)
			_ = client.SetDeadline(time.Now().Add(time.Minute)) // a hang guard only
			if _, err := io.WriteString(client, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			var req *http.Request
			select {
			case req = <-reqs:
			case <-time.After(time.Minute): // a hang guard only
				t.Fatal("no request")
			}
			conn := req.Conn.(*http.Connection)
			var judged []sink.Event
			if tc.predicate {
				conn.SetPredicate(sink.PredicateFunc(func(e sink.Event) bool {
					judged = append(judged, e)
					return tc.accept
				}))
			}
			dones := make(chan error, 2)
			err := conn.Answer(http.Reply{Req: req, Resp: http.NewResponse(200, "text/plain", []byte("hi")), Done: func(err error) { dones <- err }})
			refused := tc.predicate && !tc.accept
			if refused != (err != nil) || refused && !errors.Is(err, sink.ErrRejected) {
				t.Fatalf("Answer: %v, want refused %v", err, refused)
			}
			if tc.predicate {
				if len(judged) != 1 {
					t.Fatalf("predicate judged %d events, want 1", len(judged))
				}
				if _, ok := judged[0].(*http.Reply); !ok {
					t.Fatalf("predicate judged a %T, want *http.Reply", judged[0])
				}
			}
			if done := <-dones; (done != nil) != refused {
				t.Fatalf("Done(%v), want an error %v", done, refused)
			}
			if refused {
				return
			}
			resp, err := nethttp.ReadResponse(bufio.NewReader(client), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 2))
			if resp.StatusCode != 200 || string(body) != "hi" {
				t.Fatalf("got %d %q, want 200 \"hi\"", resp.StatusCode, body)
			}
			if len(dones) != 0 {
				t.Fatal("Done called twice")
			}
		})
	}
}
