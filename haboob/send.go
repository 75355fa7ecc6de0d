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
			if r != nil && r.Done != nil {
				r.Done(http.ErrBadReply)
			}
			continue
		}
		c, ok := r.Req.Conn.(*http.Connection)
		if !ok {
			h.log.Warn("haboob: HttpSend: request without a connection", "path", r.Req.Path)
			if r.Done != nil {
				r.Done(http.ErrNoConnection)
			}
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

// direct is a sink that writes replies straight to their connections (no
// stage hop): a Connection never rejects a valid reply, so nothing is
// refused here except replies to closed connections.
type direct struct{}

func (direct) Enqueue(e sink.Event) error {
	r, ok := e.(*http.Reply)
	if !ok || r == nil || r.Req == nil {
		return fmt.Errorf("%w: %T", http.ErrBadReply, e)
	}
	c, ok := r.Req.Conn.(*http.Connection)
	if !ok {
		return http.ErrNoConnection
	}
	if err := c.Send(r); err != nil {
		// Done has been called; the connection is gone or the reply was
		// bad: there is nobody to send a 503 to either way.
		return nil
	}
	return nil
}
func (d direct) EnqueueMany(es []sink.Event) error {
	for _, e := range es {
		if err := d.Enqueue(e); err != nil {
			return err
		}
	}
	return nil
}
func (d direct) EnqueueLossy(e sink.Event) bool { return d.Enqueue(e) == nil }
func (direct) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, &sink.RejectError{Sink: "direct", Reason: "no transactions"}
}
func (direct) Len() int                    { return 0 }
func (direct) SetPredicate(sink.Predicate) {}
func (direct) Predicate() sink.Predicate   { return nil }
