package http_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

// TestH2FlowControlSmallWindow reads two streams with a 100-byte stream
// window: the server never sends past either window, interleaves the
// streams, and every byte arrives in order.
func TestH2FlowControlSmallWindow(t *testing.T) {
	f := startServer(t, http.ServerConfig{}, answerSized)
	const window = 100
	c := h2test.Dial(t, f.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	sizes := map[uint32]int{1: 3000, 3: 2999, 5: 40_001}
	for _, id := range []uint32{1, 3, 5} {
		if err := c.Get(id, "/size/"+itoa(sizes[id])); err != nil {
			t.Fatal(err)
		}
	}
	streamWin := map[uint32]int{1: window, 3: window, 5: window}
	connWin := 65535
	bodies := map[uint32][]byte{}
	status := map[uint32]string{}
	var order []uint32 // streams of successive DATA frames
	for len(status) < 3 || len(bodies) < 3 || !ended(bodies, sizes) {
		fr, err := c.Framer.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		switch fr := fr.(type) {
		case *http2.MetaHeadersFrame:
			status[fr.StreamID] = fr.PseudoValue("status")
		case *http2.DataFrame:
			id, n := fr.StreamID, len(fr.Data())
			if n > streamWin[id] || n > connWin {
				t.Fatalf("stream %d: DATA of %d bytes with stream window %d, connection window %d", id, n, streamWin[id], connWin)
			}
			streamWin[id] -= n
			connWin -= n
			bodies[id] = append(bodies[id], fr.Data()...)
			order = append(order, id)
			if streamWin[id] == 0 && !fr.StreamEnded() {
				streamWin[id] += window
				_ = c.Framer.WriteWindowUpdate(id, window)
			}
			if connWin < 10_000 {
				connWin += 50_000
				_ = c.Framer.WriteWindowUpdate(0, 50_000)
			}
		}
	}
	for id, n := range sizes {
		if status[id] != "200" || !bytes.Equal(bodies[id], sizedBody(n)) {
			t.Errorf("stream %d: status %q, %d bytes (want %d)", id, status[id], len(bodies[id]), n)
		}
	}
	if !interleaved(order) {
		t.Errorf("the streams' DATA frames were not interleaved: %v", order)
	}
}

func ended(bodies map[uint32][]byte, sizes map[uint32]int) bool {
	for id, n := range sizes {
		if len(bodies[id]) < n {
			return false
		}
	}
	return true
}

// interleaved reports whether some stream's frames come both before and
// after another stream's.
func interleaved(order []uint32) bool {
	last := map[uint32]int{}
	for i, id := range order {
		if j, ok := last[id]; ok && j != i-1 {
			return true
		}
		last[id] = i
	}
	return false
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// TestH2ResetMidResponse resets a stream whose streamed body is being
// sent: the application's next pieces fail, and the connection goes on
// serving other streams.
func TestH2ResetMidResponse(t *testing.T) {
	failed := make(chan error, 1)
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) {
		if req.Path != "/big" {
			answerSized(req)
			return
		}
		const n, piece = 1 << 20, 16 << 10
		c := req.Conn.(*http.Connection)
		s := c.NewStream(n)
		if err := c.Send(&http.Reply{Req: req, Resp: http.NewFileResponse(200, "text/plain", n), Stream: s}); err != nil {
			failed <- err
			return
		}
		body := sizedBody(n)
		var next func(off int)
		next = func(off int) {
			if off >= n {
				failed <- errors.New("the whole body was written")
				return
			}
			_ = s.Write(body[off:off+piece], func(err error) {
				if err != nil {
					select {
					case failed <- err:
					default:
					}
					return
				}
				next(off + piece)
			})
		}
		next(0)
	})
	c := h2test.Dial(t, f.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	if err := c.Get(1, "/big"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FirstData(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Framer.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	if err := <-failed; err == nil {
		t.Fatal("piece completed without error after the reset")
	}
	if err := c.Get(3, "/size/5000"); err != nil {
		t.Fatal(err)
	}
	status, body, err := c.Response(3)
	if err != nil || status != "200" || !bytes.Equal(body, sizedBody(5000)) {
		t.Fatalf("after the reset: status %q, %d bytes, %v", status, len(body), err)
	}
	if st := f.srv.Stats().HTTP2; st.ResetsIn != 1 {
		t.Errorf("ResetsIn = %d, want 1", st.ResetsIn)
	}
}

// TestH2GoAwayOnShutdown shuts the server down with three streams
// unanswered: the client gets GOAWAY naming the last of them, the three
// responses still come, then the connection closes and Shutdown
// returns.
func TestH2GoAwayOnShutdown(t *testing.T) {
	held := make(chan *http.Request, 3)
	f := startServer(t, http.ServerConfig{}, func(req *http.Request) { held <- req })
	c := h2test.Dial(t, f.addr)
	for _, id := range []uint32{1, 3, 5} {
		if err := c.Get(id, "/size/"+itoa(int(id)*10_000)); err != nil {
			t.Fatal(err)
		}
	}
	reqs := []*http.Request{<-held, <-held, <-held}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut <- f.srv.Shutdown(ctx)
	}()
	g, err := c.GoAway()
	if err != nil {
		t.Fatal(err)
	}
	if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 5 {
		t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR and 5", g.ErrCode, g.LastStreamID)
	}
	for _, r := range reqs {
		answerSized(r)
	}
	for id, r := range c.Responses(1, 3, 5) {
		if r.Err != nil || r.Status != "200" || !bytes.Equal(r.Body, sizedBody(int(id)*10_000)) {
			t.Fatalf("stream %d after GOAWAY: status %q, %d bytes, %v", id, r.Status, len(r.Body), r.Err)
		}
	}
	if _, err := c.Framer.ReadFrame(); err == nil {
		t.Error("the connection stayed open after its last stream")
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
