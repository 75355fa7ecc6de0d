package http_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
	"github.com/sandstorm-go/sandstorm/sink"
)

// h2Seeds are frame sequences after the preface: a valid request, and
// the usual suspects (truncated, oversized, out-of-order frames).
func h2Seeds() [][]byte {
	var seeds [][]byte
	frames := func(write func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer)) []byte {
		var out, hb bytes.Buffer
		fr := http2.NewFramer(&out, nil)
		fr.AllowIllegalWrites = true
		write(fr, hpack.NewEncoder(&hb), &hb)
		return out.Bytes()
	}
	get := func(enc *hpack.Encoder, hb *bytes.Buffer, path string) []byte {
		hb.Reset()
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "x"}, {Name: ":path", Value: path}} {
			_ = enc.WriteField(f)
		}
		return bytes.Clone(hb.Bytes())
	}
	seeds = append(seeds, frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get(enc, hb, "/a"), EndStream: true, EndHeaders: true})
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteWindowUpdate(0, 1000)
	}), frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		b := get(enc, hb, "/b")
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b[:2]})
		_ = fr.WriteContinuation(3, true, b[2:])
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WriteData(3, true, []byte("x"))
	}), frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: get(enc, hb, "/"), EndHeaders: true})
		_ = fr.WriteData(1, false, make([]byte, 70000))
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}), []byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 1, 4, 0, 0, 0, 1})
	return seeds
}

// FuzzH2FrameReader feeds arbitrary bytes after the client preface to
// one server: whatever they are, the server answers or closes the
// connection (never hangs it open with input unread, never panics), and
// a normal request on a fresh connection is still served.
func FuzzH2FrameReader(f *testing.F) {
	for _, s := range h2Seeds() {
		f.Add(s)
	}
	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}, IdleTimeout: time.Second,
		Inline: func(r *http.Request) bool {
			_ = http.Respond(r, http.OK("text/plain", []byte(r.Path)))
			return true
		}}, sink.NewQueue(1), aio.Env{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Close() })
	addr := srv.Addr().String()
	f.Fuzz(func(t *testing.T, data []byte) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // hang guard
		if _, err := conn.Write(append([]byte(http2.ClientPreface), data...)); err != nil {
			return // the server closed at once: fine
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		// The server answers what it can and closes (GOAWAY, or at the
		// idle timeout), which ends the read.
		if _, err := io.Copy(io.Discard, conn); err != nil {
			var ne net.Error
			if errorsAs(err, &ne) && ne.Timeout() {
				t.Fatalf("the server kept the connection open: %v", err)
			}
		}
		c := h2test.Dial(t, addr)
		if err := c.Get(1, "/ok"); err != nil {
			t.Fatal(err)
		}
		if status, body, err := c.Response(1); err != nil || status != "200" || string(body) != "/ok" {
			t.Fatalf("a fresh connection after the input: %q %q %v", status, body, err)
		}
	})
}
