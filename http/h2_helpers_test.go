package http_test

import (
	"errors"
	"strconv"
	"strings"

	"github.com/sandstorm-go/sandstorm/http"
)

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

func errorsAs(err error, target any) bool { return errors.As(err, target) }
