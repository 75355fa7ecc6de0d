package haboob

import (
	"fmt"
	"log/slog"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// httpSend is the HttpSend stage: it hands each Reply to its request's
// connection, which formats the response header inline (the thesis's
// Combine pattern: formatting is too cheap for a stage of its own) and
// sends the responses of each connection in request order.
type httpSend struct {
	srv *Server
	log *slog.Logger
}

func (h *httpSend) Init(c *stage.Context) error {
	h.log = h.srv.logger(c)
	return c.DecodeArgs(&struct{}{})
}

func (h *httpSend) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		var r *http.Reply
		switch v := e.(type) {
		case *http.Reply:
			r = v
		case http.Reply:
			r = &v
		default:
			h.log.Warn("haboob: HttpSend: unexpected event", "type", fmt.Sprintf("%T", e))
			continue
		}
		if r == nil || r.Req == nil {
			h.log.Warn("haboob: HttpSend: reply without a request")
			if r != nil {
				dropReply(r, http.ErrBadReply)
			}
			continue
		}
		c, ok := r.Req.Conn.(*http.Connection)
		if !ok {
			h.log.Warn("haboob: HttpSend: request without a connection", "path", r.Req.Path)
			dropReply(r, http.ErrNoConnection)
			continue
		}
		// An error means the connection closed (Done was called); a bad
		// reply is a bug worth a log line.
		if err := c.Send(r); err != nil && !isClosed(err) {
			h.log.Error("haboob: HttpSend", "conn", c.String(), "err", err)
		}
	}
	return nil
}

// dropReply gives up on a reply no connection takes: its Done is told and
// a file body's reference released.
func dropReply(r *http.Reply, err error) {
	if r.Resp != nil && r.Resp.File != nil {
		r.Resp.File.File.Release()
	}
	if r.Done != nil {
		r.Done(err)
	}
}

// sendFunc hands a reply on: to the HttpSend stage (viaStage), or straight
// to its connection (sendDirect). An error means it was not taken.
type sendFunc func(*http.Reply) error

// viaStage sends replies through a stage's sink.
func viaStage(s sink.Sink) sendFunc {
	return func(r *http.Reply) error { return s.Enqueue(r) }
}

// sendDirect writes a reply straight to its connection (no stage hop): a
// Connection never rejects a valid reply, so nothing is refused here; a
// reply to a closed connection has its Done called and is dropped.
func sendDirect(r *http.Reply) error {
	if r == nil || r.Req == nil {
		return fmt.Errorf("%w: no request", http.ErrBadReply)
	}
	c, ok := r.Req.Conn.(*http.Connection)
	if !ok {
		return http.ErrNoConnection
	}
	_ = c.Send(r) // on error Done has been called; there is nobody to answer
	return nil
}

// stageSend looks up the named stage's sink as a sendFunc.
func stageSend(c *stage.Context, name string) (sendFunc, error) {
	s, err := c.Sink(name)
	if err != nil {
		return nil, err
	}
	return viaStage(s), nil
}
