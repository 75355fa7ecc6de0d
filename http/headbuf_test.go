package http_test

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
)

// headerBufferBody is request i's body: its number and a run of one
// letter, of a length that varies from request to request, so that a
// reply formatted into a buffer the socket still holds for an earlier
// one shows as a wrong body.
func headerBufferBody(i int) string {
	n := (i*397)%6000 + 1
	return strconv.Itoa(i) + ":" + strings.Repeat(string(rune('a'+i%26)), n)
}

// TestHeaderBufferNotReusedWhileWritten: a connection formats its replies
// into one reused buffer (conn_headbuf.go) only while the socket holds
// no earlier reply in it. A client pipelines 1,500 requests and reads
// nothing until it has sent them all, through small socket buffers, so
// that many replies wait in the socket's outbox by reference while later
// ones are formatted; every reply, copied into the header's buffer
// (bodies of 1 to 6,000 bytes, under InlineBody), must arrive intact and
// in order. Answered inline on the event loop and by a stage's two
// workers; run under -race, it also shows the buffer's hand-over ordered.
func TestHeaderBufferNotReusedWhileWritten(t *testing.T) {
	const requests = 1500
	var conn atomic.Pointer[http.Connection]
	answer := func(req *http.Request) {
		conn.Store(req.Conn.(*http.Connection))
		i, err := strconv.Atoi(strings.TrimPrefix(req.Path, "/"))
		if err != nil {
			_ = http.Respond(req, http.StatusResponse(http.StatusNotFound))
			return
		}
		_ = http.Respond(req, http.OK("text/plain", []byte(headerBufferBody(i))))
	}
	tests := []struct {
		name   string
		inline bool
	}{
		{"inline", true},
		{"stage", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := http.ServerConfig{MaxPipeline: requests}
			cfg.Socket.SendBuffer = 64 << 10
			if tc.inline {
				cfg.Inline = func(req *http.Request) bool { answer(req); return true }
			}
			f := startServer(t, cfg, answer)
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang guard only
			var reqs strings.Builder
			for i := range requests {
				fmt.Fprintf(&reqs, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
			}
			if _, err := c.Write([]byte(reqs.String())); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i := range requests {
				resp, body := readResponse(t, br, "GET")
				if want := headerBufferBody(i); resp.StatusCode != 200 || body != want {
					t.Fatalf("reply %d: %d, %d bytes %.20q..., want 200, %d bytes %.20q...", i, resp.StatusCode, len(body), body, len(want), want)
				}
			}
			// The replies did wait in the outbox while later ones were
			// formatted (else this test shows nothing).
			if out := conn.Load().Socket().Stats().MaxOutstanding; out < 1<<20 {
				t.Fatalf("at most %d bytes waited in the outbox, want the socket to have held 1 MiB", out)
			}
		})
	}
}
