package aio

import (
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

// BenchmarkConnEnqueue measures the producer side of one connection:
// Enqueue of 64-byte writes through the outbox to a loopback client that
// reads everything, with no predicate, with a predicate that admits
// everything, and with a concurrency counter (large enough never to
// refuse) that gets every write back once its bytes are written. The
// difference between the rows is what admission costs per write.
func BenchmarkConnEnqueue(b *testing.B) {
	for _, tc := range []struct {
		name string
		pred func() sink.Predicate
	}{
		{"none", func() sink.Predicate { return nil }},
		{"accept-all", func() sink.Predicate { return sink.PredicateFunc(func(sink.Event) bool { return true }) }},
		{"counter", func() sink.Predicate { return enqueuepred.NewCounter(1 << 30) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			conns := make(chan *Connection, 1)
			srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0"}, fnSink(func(e sink.Event) error {
				if c, ok := e.(*Connection); ok {
					conns <- c
				}
				return nil
			}), Env{})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			client := dial(b, srv)
			read := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, client)
				close(read)
			}()
			c := <-conns
			if p := tc.pred(); p != nil {
				c.SetPredicate(p)
			}
			msg := make([]byte, 64)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				err := c.Enqueue(msg)
				if err == nil {
					i++
					continue
				}
				if !errors.Is(err, ErrClogged) {
					b.Fatal(err)
				}
				runtime.Gosched() // the write threshold: let the loop write
			}
			b.StopTimer()
			_ = c.Close()
			client.Close()
			<-read
		})
	}
}
