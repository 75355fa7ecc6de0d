package http_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// benchServer answers every request with body from one stage, or inline
// (no stage hop) when inline is set.
func benchServer(b *testing.B, body []byte, inline bool) (string, func()) {
	b.Helper()
	m := stage.NewManager(stage.Options{})
	answer := func(req *http.Request) {
		_ = req.Conn.(*http.Connection).Send(&http.Reply{Req: req, Resp: http.OK("application/octet-stream", body)})
	}
	var target sink.Sink
	if inline {
		target = inlineSink(answer)
	} else {
		st, err := m.CreateStage("App", stage.HandlerFunc(func(batch []sink.Event) error {
			for _, e := range batch {
				answer(e.(*http.Request))
			}
			return nil
		}), stage.StageConfig{})
		if err != nil {
			b.Fatal(err)
		}
		target = st.Sink()
	}
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}}, target, aio.Env{Manager: m})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Addr().String(), func() {
		_ = srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	}
}

// inlineSink runs f on the enqueuing goroutine (the socket's event loop).
type inlineSink func(*http.Request)

func (f inlineSink) Enqueue(e sink.Event) error { f(e.(*http.Request)); return nil }
func (f inlineSink) EnqueueMany(es []sink.Event) error {
	for _, e := range es {
		f(e.(*http.Request))
	}
	return nil
}
func (f inlineSink) EnqueueLossy(e sink.Event) bool { f(e.(*http.Request)); return true }
func (f inlineSink) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, &sink.RejectError{Sink: "inline"}
}
func (f inlineSink) Len() int                    { return 0 }
func (f inlineSink) SetPredicate(sink.Predicate) {}
func (f inlineSink) Predicate() sink.Predicate   { return nil }

// BenchmarkServer measures request/response round trips over loopback:
// conns clients, each sending a request and reading the response before
// the next, against the server with an application stage and with the
// answer given inline, and against net/http for reference. ns/op is per
// request for the whole system (clients included); allocs/op counts both
// sides.
func BenchmarkServer(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	for _, conns := range []int{1, 64} {
		for _, mode := range []string{"stage", "inline", "net/http"} {
			b.Run(fmt.Sprintf("%s/conns=%d", mode, conns), func(b *testing.B) {
				var addr string
				var stop func()
				if mode == "net/http" {
					ln, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						b.Fatal(err)
					}
					hs := &nethttp.Server{Handler: nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
						w.Header().Set("Content-Type", "application/octet-stream")
						w.Write(body)
					})}
					go hs.Serve(ln)
					addr, stop = ln.Addr().String(), func() { hs.Close() }
				} else {
					addr, stop = benchServer(b, body, mode == "inline")
				}
				defer stop()
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				var wg sync.WaitGroup
				per := b.N/conns + 1
				b.ResetTimer()
				for range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c, err := net.Dial("tcp", addr)
						if err != nil {
							b.Error(err)
							return
						}
						defer c.Close()
						br := bufio.NewReader(c)
						req := []byte("GET /x HTTP/1.1\r\nHost: b\r\n\r\n")
						for range per {
							if _, err := c.Write(req); err != nil {
								b.Error(err)
								return
							}
							resp, err := nethttp.ReadResponse(br, nil)
							if err != nil {
								b.Error(err)
								return
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
