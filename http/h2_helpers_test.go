package http_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sandstorm-go/sandstorm/http"
)

// h2cClient is an HTTP/2 client with prior knowledge over plain TCP: one
// connection per client, every request a stream on it.
func h2cClient(t *testing.T) *nethttp.Client {
	t.Helper()
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &nethttp.Client{Transport: tr, Timeout: 30 * time.Second}
}

// sizedBody is n bytes of a pattern that shows misplaced bytes.
func sizedBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%23)
	}
	return b
}

// answerSized answers /size/N (N bytes) three ways by N's remainder: an
// in-memory body, a body of buffers (Reply.Body), or a Stream written in
// pieces, so that every body source is exercised.
func answerSized(req *http.Request) {
	n, err := strconv.Atoi(strings.TrimPrefix(req.Path, "/size/"))
	if err != nil {
		_ = http.Respond(req, http.NotFound())
		return
	}
	body := sizedBody(n)
	c := req.Conn.(*http.Connection)
	switch n % 3 {
	case 0:
		_ = http.Respond(req, http.OK("application/octet-stream", body))
	case 1:
		half := len(body) / 2
		_ = c.Send(&http.Reply{Req: req, Resp: http.NewFileResponse(200, "application/octet-stream", int64(n)),
			Body: [][]byte{body[:half], body[half:]}})
	default:
		s := c.NewStream(int64(n))
		off := 0
		if n%2 == 0 && n >= 7000 { // a piece written before the reply is sent waits for it
			if err := s.Write(body[:7000], nil); err != nil {
				return
			}
			off = 7000
		}
		if err := c.Send(&http.Reply{Req: req, Resp: http.NewFileResponse(200, "application/octet-stream", int64(n)), Stream: s}); err != nil {
			return
		}
		for ; off < n; off += 7000 {
			if err := s.Write(body[off:min(off+7000, n)], nil); err != nil {
				return
			}
		}
	}
}

// rawH2 is a frame-level client, for what a well-behaved client never
// sends.
type rawH2 struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	hb   bytes.Buffer
	enc  *hpack.Encoder
	// goAwayFrame is the GOAWAY responses or goAway read, if any.
	goAwayFrame *http2.GoAwayFrame
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second)) // a hang guard only
	return rawOn(t, conn, settings...)
}

// rawOn starts HTTP/2 with prior knowledge on conn.
func rawOn(t *testing.T, conn net.Conn, settings ...http2.Setting) *rawH2 {
	t.Helper()
	c := &rawH2{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hb)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// block encodes a GET for path (and extra fields as name, value pairs).
func (c *rawH2) block(path string, extra ...string) []byte {
	c.hb.Reset()
	fields := append([]string{":method", "GET", ":scheme", "http", ":authority", "localhost", ":path", path}, extra...)
	for i := 0; i < len(fields); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(c.hb.Bytes())
}

func (c *rawH2) get(id uint32, path string) error {
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(path), EndStream: true, EndHeaders: true})
}

// h2Result is one stream's response as a raw client read it.
type h2Result struct {
	status string
	body   []byte
	err    error
}

// response reads frames until stream id's response is complete.
func (c *rawH2) response(id uint32) (status string, body []byte, err error) {
	r := c.responses(id)[id]
	return r.status, r.body, r.err
}

// responses reads frames until the responses of streams ids are
// complete (or failed), giving back the windows they use.
func (c *rawH2) responses(ids ...uint32) map[uint32]*h2Result {
	res := map[uint32]*h2Result{}
	for _, id := range ids {
		res[id] = &h2Result{}
	}
	left := len(ids)
	end := func(id uint32, err error) {
		if r := res[id]; r != nil && r.err == nil {
			r.err = err
			left--
		}
	}
	done := errors.New("done")
	for left > 0 {
		f, err := c.fr.ReadFrame()
		if err != nil {
			for id := range res {
				end(id, err)
			}
			break
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if r := res[f.StreamID]; r != nil {
				r.status = f.PseudoValue("status")
				if f.StreamEnded() {
					end(f.StreamID, done)
				}
			}
		case *http2.DataFrame:
			if r := res[f.StreamID]; r != nil {
				r.body = append(r.body, f.Data()...)
				if n := uint32(len(f.Data())); n > 0 {
					_ = c.fr.WriteWindowUpdate(0, n)
					_ = c.fr.WriteWindowUpdate(f.StreamID, n)
				}
				if f.StreamEnded() {
					end(f.StreamID, done)
				}
			}
		case *http2.RSTStreamFrame:
			end(f.StreamID, fmt.Errorf("stream %d reset: %v", f.StreamID, f.ErrCode))
		case *http2.GoAwayFrame:
			c.goAwayFrame = f
			for id := range res {
				if id > f.LastStreamID {
					end(id, fmt.Errorf("GOAWAY %v before stream %d", f.ErrCode, id))
				}
			}
		}
	}
	for _, r := range res {
		if r.err == done {
			r.err = nil
		}
	}
	return res
}

// goAway reads frames until GOAWAY (or the connection ends) and returns
// it.
func (c *rawH2) goAway() (*http2.GoAwayFrame, error) {
	if c.goAwayFrame != nil {
		return c.goAwayFrame, nil
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g, nil
		}
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
