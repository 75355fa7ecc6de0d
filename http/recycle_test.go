package http_test

import (
	"bufio"
	"fmt"
	"io"
	nethttp "net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// TestRecycleInline: with ServerConfig.RecycleInline, the memory of a
// request the Inline hook answered is reused for the connection's next
// request (the same *Request comes back), and never while something may
// still see it: a server without RecycleInline, one with OnResponse (its
// records' strings stay valid), a connection with an admission predicate
// (it holds the reply until written, even if removed meanwhile) keep every request's strings intact.
// An answer that waits for an earlier one: TestRecycleInlineWaitingAnswer.
func TestRecycleInline(t *testing.T) {
	tests := []struct {
		name      string
		recycle   bool
		log       bool // an OnResponse keeps the records
		predicate bool // the connection has an admission predicate
		removed   bool // … removed by the hook once it answered
		reused    bool // want requests' memory reused
	}{
		{name: "recycled", recycle: true, reused: true},
		{name: "off", recycle: false},
		{name: "OnResponse", recycle: true, log: true},
		{name: "predicate", recycle: true, predicate: true},
		{name: "predicate removed after the answer", recycle: true, predicate: true, removed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen []*http.Request // every request the hook answered
			var paths []string       // their paths, copied when seen
			var logged []string      // the records' targets, as OnResponse got them
			cfg := http.ServerConfig{RecycleInline: tc.recycle}
			if tc.log {
				cfg.OnResponse = func(rec http.AccessRecord) {
					mu.Lock()
					logged = append(logged, rec.Target)
					mu.Unlock()
				}
			}
			cfg.Inline = func(r *http.Request) bool {
				if strings.HasPrefix(r.Path, "/stage") {
					return false
				}
				conn := r.Conn.(*http.Connection)
				if tc.predicate && conn.Predicate() == nil {
					conn.SetPredicate(sink.PredicateFunc(func(sink.Event) bool { return true }))
				}
				mu.Lock()
				seen = append(seen, r)
				paths = append(paths, strings.Clone(r.Path))
				mu.Unlock()
				_ = conn.Answer(http.Reply{Req: r, Resp: http.OK("text/plain", []byte(r.Path))})
				if tc.removed {
					// The reply admitted under it is still tracked until written.
					conn.SetPredicate(nil)
				}
				return true
			}
			staged := sink.NewQueue(0)
			client := listenAndDial(t, cfg, staged)
			_ = client.SetDeadline(time.Now().Add(time.Minute)) // a hang guard only
			br := bufio.NewReader(client)

			const requests = 6
			for i := range requests {
				path := fmt.Sprintf("/inline-%d", i)
				head := "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"
				if _, err := io.WriteString(client, head); err != nil {
					t.Fatal(err)
				}
				readBody(t, br, "GET", path)
			}
			mu.Lock()
			defer mu.Unlock()
			reused := 0
			for i := 1; i < len(seen); i++ {
				if seen[i] == seen[i-1] {
					reused++
				}
			}
			if tc.reused {
				if reused != requests-1 {
					t.Fatalf("%d of %d requests reused the one before, want all", reused, requests-1)
				}
				return
			}
			if reused != 0 {
				t.Fatalf("%d requests reused the memory of the one before, want none", reused)
			}
			for i, r := range seen {
				if r.Path != paths[i] {
					t.Fatalf("request %d's path is %q now, was %q", i, r.Path, paths[i])
				}
			}
			for i, target := range logged {
				if !strings.HasPrefix(target, "/inline-") && target != "/stage" {
					t.Fatalf("record %d's target is %q now", i, target)
				}
			}
		})
	}
}

// TestRecycleInlineWaitingAnswer: a request answered inline whose answer
// waits for an earlier request's is not recycled while it waits. Each
// round sends "GET /stage" and "GET /inline-a-i" in one packet (the inline
// answer waits behind /stage, which the test answers last), then, once the
// hook has answered /inline-a-i, "HEAD /inline-b-i" in a packet of its own,
// parsed after the first batch's recycling. Were /inline-a-i's memory
// reused for the HEAD, its waiting answer would be emitted as a HEAD's,
// without its body.
func TestRecycleInlineWaitingAnswer(t *testing.T) {
	answered := make(chan *http.Request, 2)
	cfg := http.ServerConfig{RecycleInline: true}
	cfg.Inline = func(r *http.Request) bool {
		if r.Path == "/stage" {
			return false
		}
		_ = r.Conn.(*http.Connection).Answer(http.Reply{Req: r, Resp: http.OK("text/plain", []byte(r.Path))})
		answered <- r
		return true
	}
	staged := sink.NewQueue(0)
	client := listenAndDial(t, cfg, staged)
	_ = client.SetDeadline(time.Now().Add(time.Minute)) // a hang guard only
	br := bufio.NewReader(client)
	for i := range 4 {
		a, b := fmt.Sprintf("/inline-a-%d", i), fmt.Sprintf("/inline-b-%d", i)
		if _, err := io.WriteString(client, "GET /stage HTTP/1.1\r\nHost: x\r\n\r\nGET "+a+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		ra := <-answered
		if _, err := io.WriteString(client, "HEAD "+b+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if rb := <-answered; rb == ra {
			t.Fatalf("round %d: %s reused the memory of %s while its answer waited", i, b, a)
		}
		answerStaged(t, staged)
		readBody(t, br, "GET", "/stage")
		readBody(t, br, "GET", a)
		readBody(t, br, "HEAD", "")
	}
}

// readBody reads the next response to a request of method and checks its
// body.
func readBody(t *testing.T, br *bufio.Reader, method, want string) {
	t.Helper()
	resp, err := nethttp.ReadResponse(br, &nethttp.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != want {
		t.Fatalf("%s response %q, want %q", method, body, want)
	}
}

// answerStaged answers the next request that reached the server's sink
// with its path.
func answerStaged(t *testing.T, q *sink.Queue) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard only
	for {
		var evs [1]sink.Event
		if q.Dequeue(evs[:], nil) == 1 {
			r := evs[0].(*http.Request)
			if err := http.Respond(r, http.OK("text/plain", []byte(r.Path))); err != nil {
				t.Fatal(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no request reached the sink")
		}
		time.Sleep(time.Millisecond)
	}
}
