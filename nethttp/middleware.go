package nethttp

import (
	"context"
	"net/http"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Exchange is one HTTP request admitted by Middleware, waiting to be
// served on a stage's goroutines by Serve.
type Exchange struct {
	W    http.ResponseWriter
	R    *http.Request
	Next http.Handler
}

// Middleware returns middleware that admits each request through the stage
// behind s and serves it there: the request is enqueued as a
// *stage.Request[*Exchange, struct{}], and the stage's handler (Serve, or
// your own typed handler of that type) runs next.ServeHTTP on the stage's
// goroutines. A rejected request gets 503 with Retry-After (retryAfter, 0
// → 1s) and never reaches next; one not served within timeout (0: no
// bound but the request's context) gets 504, and next, if it has begun,
// runs on with a ResponseWriter that discards its output.
func Middleware(s sink.Sink, timeout, retryAfter time.Duration) func(http.Handler) http.Handler {
	front := stageName(s)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// next sees a context that ends only once this goroutine has
			// taken the writer back, so a late answer cannot win the race
			// with the 504.
			hctx, hcancel := context.WithCancel(r.Context())
			defer hcancel()
			ctx := r.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			gw := &guardedWriter{w: w, header: http.Header{}, claim: make(chan struct{}, 1)}
			gw.claim <- struct{}{}
			_, err := stage.Call[*Exchange, struct{}](ctx, s, &Exchange{W: gw, R: r.WithContext(hctx), Next: next})
			if err == nil {
				return
			}
			// Take the writer back from a handler that may still run (a
			// partial answer it has begun stays as it is).
			<-gw.claim
			gw.dead = true
			started := gw.started
			gw.claim <- struct{}{}
			if !started {
				writeError(w, err, front, retryAfter)
			}
		})
	}
}

// Serve is the stage handler for Middleware: it runs each Exchange's Next
// handler and answers the request. Register it under a name of your choice:
//
//	reg.Register("web.Serve", func() stage.Handler { return nethttp.Serve() })
func Serve() stage.Handler {
	return stage.TypedFunc(func(batch []*stage.Request[*Exchange, struct{}]) error {
		for _, r := range batch {
			ex := r.Value
			ex.Next.ServeHTTP(ex.W, ex.R)
			r.Reply(struct{}{})
		}
		return nil
	})
}

// guardedWriter lets the stage's goroutine write the response unless the
// waiting ServeHTTP gave up first (timeout): whoever holds claim may touch
// the real writer; after the waiter gave up (dead), writes are discarded.
type guardedWriter struct {
	w       http.ResponseWriter
	header  http.Header // the stage handler's own; copied to w's on its first write
	claim   chan struct{}
	dead    bool // guarded by claim
	started bool // guarded by claim: the stage's handler wrote something
}

// Header returns the header map of the stage's handler (its goroutine
// only).
func (g *guardedWriter) Header() http.Header { return g.header }

// startLocked sends the handler's header map on its first write.
func (g *guardedWriter) startLocked() {
	if g.started {
		return
	}
	g.started = true
	h := g.w.Header()
	for k, v := range g.header {
		h[k] = v
	}
}

func (g *guardedWriter) Write(b []byte) (int, error) {
	<-g.claim
	defer func() { g.claim <- struct{}{} }()
	if g.dead {
		return len(b), nil
	}
	g.startLocked()
	return g.w.Write(b)
}

func (g *guardedWriter) WriteHeader(code int) {
	<-g.claim
	defer func() { g.claim <- struct{}{} }()
	if g.dead {
		return
	}
	g.startLocked()
	g.w.WriteHeader(code)
}
