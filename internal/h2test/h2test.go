// Package h2test holds the HTTP/2 clients shared by the tests of package
// http and of Haboob (apps/haboob): an h2c client for whole requests
// (Transport, Client), and Conn, a frame-level client for what a test
// must see or do itself — read frames, give back flow-control windows,
// reset streams, send what a well-behaved client never sends.
//
// It imports nothing of this module, so that package http's internal
// tests may use it too.
package h2test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Transport speaks HTTP/2 with prior knowledge (h2c) over plain TCP:
// one connection per host, every request a stream on it.
func Transport() *http2.Transport {
	return &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
}

// Client is an h2c client (Transport) with a 30s timeout, a hang guard;
// t's cleanup closes its idle connections.
func Client(t *testing.T) *nethttp.Client {
	tr := Transport()
	t.Cleanup(tr.CloseIdleConnections)
	return &nethttp.Client{Transport: tr, Timeout: 30 * time.Second}
}

// Conn is a frame-level HTTP/2 client on one connection.
type Conn struct {
	Conn   net.Conn
	Framer *http2.Framer // reads and writes frames; MetaHeadersFrames are decoded
	// Enc encodes header fields into Buf (what Block does); a test may
	// use both to build a header block of its own.
	Enc *hpack.Encoder
	Buf bytes.Buffer
	// GoAwayFrame is the GOAWAY Responses or GoAway read, if any.
	GoAwayFrame *http2.GoAwayFrame
}

// Dial connects to addr and starts HTTP/2 on it (On).
func Dial(t *testing.T, addr string, settings ...http2.Setting) *Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return On(t, conn, settings...)
}

// On starts HTTP/2 with prior knowledge on conn (plain TCP, or TLS that
// negotiated h2): it writes the client preface and a SETTINGS frame with
// settings. A deadline two minutes away is its hang guard; t's cleanup
// closes conn.
func On(t *testing.T, conn net.Conn, settings ...http2.Setting) *Conn {
	t.Helper()
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	c := &Conn{Conn: conn, Framer: http2.NewFramer(conn, conn)}
	c.Framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.Enc = hpack.NewEncoder(&c.Buf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.Framer.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// Block encodes the header block of a GET for path on http://localhost,
// with extra fields as name, value pairs.
func (c *Conn) Block(path string, extra ...string) []byte {
	c.Buf.Reset()
	fields := append([]string{":method", "GET", ":scheme", "http", ":authority", "localhost", ":path", path}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = c.Enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(c.Buf.Bytes())
}

// Get sends a GET for path on stream id, in one HEADERS frame that ends
// the stream.
func (c *Conn) Get(id uint32, path string) error {
	return c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.Block(path), EndStream: true, EndHeaders: true})
}

// Result is one stream's response as Responses read it.
type Result struct {
	Status string // :status
	Body   []byte
	Err    error // why the stream did not end well: reset, GOAWAY, the connection's error
}

// Response reads frames until stream id's response is complete.
func (c *Conn) Response(id uint32) (status string, body []byte, err error) {
	r := c.Responses(id)[id]
	return r.Status, r.Body, r.Err
}

// Responses reads frames until the responses of streams ids are
// complete (or failed), giving back the windows their DATA uses.
func (c *Conn) Responses(ids ...uint32) map[uint32]*Result {
	res := map[uint32]*Result{}
	for _, id := range ids {
		res[id] = &Result{}
	}
	left := len(ids)
	end := func(id uint32, err error) {
		if r := res[id]; r != nil && r.Err == nil {
			r.Err = err
			left--
		}
	}
	done := errors.New("done")
	for left > 0 {
		f, err := c.Framer.ReadFrame()
		if err != nil {
			for id := range res {
				end(id, err)
			}
			break
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if r := res[f.StreamID]; r != nil {
				r.Status = f.PseudoValue("status")
				if f.StreamEnded() {
					end(f.StreamID, done)
				}
			}
		case *http2.DataFrame:
			if r := res[f.StreamID]; r != nil {
				r.Body = append(r.Body, f.Data()...)
				if n := uint32(len(f.Data())); n > 0 {
					_ = c.Framer.WriteWindowUpdate(0, n)
					_ = c.Framer.WriteWindowUpdate(f.StreamID, n)
				}
				if f.StreamEnded() {
					end(f.StreamID, done)
				}
			}
		case *http2.RSTStreamFrame:
			end(f.StreamID, fmt.Errorf("stream %d reset: %v", f.StreamID, f.ErrCode))
		case *http2.GoAwayFrame:
			c.GoAwayFrame = f
			for id := range res {
				if id > f.LastStreamID {
					end(id, fmt.Errorf("GOAWAY %v before stream %d", f.ErrCode, id))
				}
			}
		}
	}
	for _, r := range res {
		if r.Err == done {
			r.Err = nil
		}
	}
	return res
}

// Bodies reads the 200 responses of streams ids, sent under a stream
// window of window bytes: it fails if a stream gets DATA past that
// window, is reset or answers another status; it gives back each
// stream's window once half of it is used and the connection's at once.
// It returns the bodies and the streams of the DATA frames in the order
// they came.
func (c *Conn) Bodies(window int, ids ...uint32) (bodies map[uint32][]byte, order []uint32, err error) {
	bodies = map[uint32][]byte{}
	unacked := map[uint32]int{}
	ended := map[uint32]bool{}
	for len(ended) < len(ids) {
		fr, err := c.Framer.ReadFrame()
		if err != nil {
			return nil, nil, err
		}
		switch fr := fr.(type) {
		case *http2.MetaHeadersFrame:
			if st := fr.PseudoValue("status"); st != "200" {
				return nil, nil, fmt.Errorf("stream %d: status %s", fr.StreamID, st)
			}
		case *http2.RSTStreamFrame:
			return nil, nil, fmt.Errorf("stream %d reset: %v", fr.StreamID, fr.ErrCode)
		case *http2.DataFrame:
			id, n := fr.StreamID, len(fr.Data())
			if unacked[id]+n > window {
				return nil, nil, fmt.Errorf("stream %d: %d bytes in flight past its window of %d", id, unacked[id]+n, window)
			}
			bodies[id] = append(bodies[id], fr.Data()...)
			order = append(order, id)
			unacked[id] += n
			if fr.StreamEnded() {
				ended[id] = true
			} else if unacked[id] >= window/2 {
				_ = c.Framer.WriteWindowUpdate(id, uint32(unacked[id]))
				unacked[id] = 0
			}
			if n > 0 {
				_ = c.Framer.WriteWindowUpdate(0, uint32(n))
			}
		}
	}
	return bodies, order, nil
}

// FirstData reads frames until the first DATA frame of stream id, and
// returns it.
func (c *Conn) FirstData(id uint32) (*http2.DataFrame, error) {
	for {
		fr, err := c.Framer.ReadFrame()
		if err != nil {
			return nil, err
		}
		if d, ok := fr.(*http2.DataFrame); ok && d.StreamID == id {
			return d, nil
		}
	}
}

// GoAway reads frames until GOAWAY (or the connection's end) and
// returns it.
func (c *Conn) GoAway() (*http2.GoAwayFrame, error) {
	if c.GoAwayFrame != nil {
		return c.GoAwayFrame, nil
	}
	for {
		f, err := c.Framer.ReadFrame()
		if err != nil {
			return nil, err
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			c.GoAwayFrame = g
			return g, nil
		}
	}
}
