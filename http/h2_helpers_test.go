package http_test

import (
	"bytes"
	"context"
	"crypto/tls"
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
		if err := c.Send(&http.Reply{Req: req, Resp: http.NewFileResponse(200, "application/octet-stream", int64(n)), Stream: s}); err != nil {
			return
		}
		for off := 0; off < n; off += 7000 {
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
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second)) // a hang guard only
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

// response reads frames until stream id's response is complete and
// returns its status and body; it answers PINGs and ignores other
// streams' frames.
func (c *rawH2) response(id uint32) (status string, body []byte, err error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return status, body, err
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				status = f.PseudoValue("status")
				if f.StreamEnded() {
					return status, body, nil
				}
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				body = append(body, f.Data()...)
				if len(f.Data()) > 0 {
					_ = c.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
					_ = c.fr.WriteWindowUpdate(id, uint32(len(f.Data())))
				}
				if f.StreamEnded() {
					return status, body, nil
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return status, body, fmt.Errorf("stream %d reset: %v", id, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			if id > f.LastStreamID {
				return status, body, fmt.Errorf("GOAWAY %v before stream %d", f.ErrCode, id)
			}
		}
	}
}

// goAway reads frames until GOAWAY (or the connection ends) and returns
// it.
func (c *rawH2) goAway() (*http2.GoAwayFrame, error) {
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
