package http_test

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
	"github.com/sandstorm-go/sandstorm/sink"
)

// TestH2AnswersOfOnePacketLeaveInOneWrite: requests of ten streams that
// arrive in one packet and are answered while they are delivered (the
// Inline hook, as Haboob's cache hits) leave in one write to the socket,
// their HEADERS and DATA frames together, as nginx writes the frames of
// one loop iteration at once (H2Stats.Writes counts the writes).
func TestH2AnswersOfOnePacketLeaveInOneWrite(t *testing.T) {
	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"},
		Inline: func(r *http.Request) bool {
			_ = http.Respond(r, http.OK("text/plain", []byte("answer to "+r.Path)))
			return true
		}}, sink.NewQueue(1), aio.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := h2test.Dial(t, srv.Addr().String())
	if err := c.Get(1, "/first"); err != nil { // the SETTINGS exchange is over once it is answered
		t.Fatal(err)
	}
	if _, _, err := c.Response(1); err != nil {
		t.Fatal(err)
	}
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	var ids []uint32
	for id := uint32(3); id < 23; id += 2 {
		ids = append(ids, id)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.Block("/s" + string(rune('a'+id))),
			EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	before := srv.Stats().HTTP2.Writes
	if _, err := c.Conn.Write(frames.Bytes()); err != nil { // one packet
		t.Fatal(err)
	}
	for id, r := range c.Responses(ids...) {
		if want := "answer to /s" + string(rune('a'+id)); r.Err != nil || r.Status != "200" || string(r.Body) != want {
			t.Fatalf("stream %d: %q %q %v, want 200 %q", id, r.Status, r.Body, r.Err, want)
		}
	}
	// Writes are counted before the bytes go out: the write that carried
	// the answers is counted by now, and the client's WINDOW_UPDATEs need
	// no answer.
	if got := srv.Stats().HTTP2.Writes - before; got != 1 {
		t.Fatalf("the answers of %d streams took %d writes, want 1", len(ids), got)
	}
}
