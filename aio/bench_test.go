package aio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/panjf2000/gnet/v2"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// BenchmarkEcho measures echo throughput over loopback: the same client
// load (conns connections, each sending a message and reading the echo
// before sending the next) against
//
//   - aio-stage:  Listen + an application stage that writes every packet
//     back (the SEDA path: event loop → stage queue → handler → connection
//     sink → event loop);
//   - aio-inline: Listen with a reader sink that writes back inside the
//     event loop (the aio layer alone);
//   - gnet:       a plain gnet echo handler;
//   - net:        net.Listener with a goroutine per connection.
//
// Run: go test -run XXX -bench Echo -benchtime 20000x ./aio/ for a quick
// look; README.md's figures are the median of
// go test -run XXX -bench Echo -benchtime 100000x -count 3 ./aio/
func BenchmarkEcho(b *testing.B) {
	servers := []struct {
		name  string
		start func(b *testing.B) (addr string, stop func())
	}{
		{"aio-stage", startAIOStageEcho},
		{"aio-inline", startAIOInlineEcho},
		{"gnet", startGnetEcho},
		{"net", startNetEcho},
	}
	for _, load := range []struct{ conns, size int }{{64, 4 << 10}, {256, 512}} {
		for _, s := range servers {
			b.Run(fmt.Sprintf("%s/c%d-%dB", s.name, load.conns, load.size), func(b *testing.B) {
				addr, stop := s.start(b)
				defer stop()
				runEchoLoad(b, addr, load.conns, load.size)
			})
		}
	}
}

// runEchoLoad runs b.N request/response exchanges over conns connections.
func runEchoLoad(b *testing.B, addr string, conns, size int) {
	runEchoLoadDial(b, conns, size, func() (net.Conn, error) { return net.Dial("tcp", addr) })
}

// runEchoLoadDial is runEchoLoad over connections made by dial.
func runEchoLoadDial(b *testing.B, conns, size int, dial func() (net.Conn, error)) {
	b.Helper()
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	msg := pattern(1, size)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

type benchEcho struct{ self sink.Sink }

func (h *benchEcho) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch v := e.(type) {
		case *Connection:
			if err := v.StartReader(h.self); err != nil {
				return err
			}
		case Packet:
			if err := v.Conn.Enqueue(v.Data); err != nil {
				return err
			}
		}
	}
	return nil
}

func startAIOStageEcho(b *testing.B) (string, func()) {
	m := stage.NewManager(stage.Options{})
	h := &benchEcho{}
	st, err := m.CreateStage("Echo", h, stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 2}})
	if err != nil {
		b.Fatal(err)
	}
	h.self = st.Sink()
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0"}, st.Sink(), Env{Manager: m})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Addr().String(), func() {
		_ = srv.Close()
		_ = m.Shutdown(context.Background())
	}
}

// inlineEcho is a sink for a server's connections that reads each one
// and answers every packet with reply, inside the event loop.
func inlineEcho(reply func(Packet) error) fnSink {
	var echo fnSink
	echo = func(e sink.Event) error {
		switch v := e.(type) {
		case *Connection:
			return v.StartReader(echo)
		case Packet:
			return reply(v)
		}
		return nil
	}
	return echo
}

func startAIOInlineEcho(b *testing.B) (string, func()) {
	echo := inlineEcho(func(p Packet) error { return p.Conn.Enqueue(p.Data) })
	srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0"}, echo, Env{})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Addr().String(), func() { _ = srv.Close() }
}

// gnetEcho is the reference: what gnet does with no layer on top.
type gnetEcho struct {
	gnet.BuiltinEventEngine
	eng    gnet.Engine
	addr   net.Addr
	booted chan struct{}
}

func (g *gnetEcho) OnBoot(eng gnet.Engine) gnet.Action {
	g.eng = eng
	g.addr = boundAddr(eng)
	close(g.booted)
	return gnet.None
}

func (g *gnetEcho) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Next(-1)
	_, _ = c.Write(buf)
	return gnet.None
}

// boundAddr asks the kernel which address gnet's listener got (for port 0).
func boundAddr(eng gnet.Engine) net.Addr {
	fd, err := eng.Dup()
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return nil
	}
	if a, ok := sa.(*syscall.SockaddrInet4); ok {
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), a.Addr[:]...)), Port: a.Port}
	}
	return nil
}

func startGnetEcho(b *testing.B) (string, func()) {
	g := &gnetEcho{booted: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- gnet.Run(g, "tcp://127.0.0.1:0", gnet.WithMulticore(true), gnet.WithLogger(gnetLogger{Env{}.withDefaults().Logger}))
	}()
	select {
	case <-g.booted:
	case err := <-done:
		b.Fatal(err)
	}
	return g.addr.String(), func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = g.eng.Stop(ctx)
		<-done
	}
}

func startNetEcho(b *testing.B) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					b.Error(err)
				}
				return
			}
			mu.Lock()
			open[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 16<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// BenchmarkAcceptChurn measures connection churn: each operation dials,
// exchanges one 64-byte echo and closes, from 16 clients at once, against
// the aio server (its own accept goroutine handing connections to gnet)
// and the references (gnet accepting in its own loop, net).
//
// Run: go test -run XXX -bench AcceptChurn -benchtime 5000x ./aio/ (more
// runs out of ephemeral ports: every connection leaves a TIME_WAIT)
func BenchmarkAcceptChurn(b *testing.B) {
	for _, s := range []struct {
		name  string
		start func(b *testing.B) (addr string, stop func())
	}{
		{"aio-inline", startAIOInlineEcho},
		{"gnet", startGnetEcho},
		{"net", startNetEcho},
	} {
		b.Run(s.name, func(b *testing.B) {
			addr, stop := s.start(b)
			defer stop()
			msg := make([]byte, 64)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			b.ResetTimer()
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, len(msg))
					for next.Add(1) <= int64(b.N) {
						c, err := net.Dial("tcp", addr)
						if err != nil {
							errs <- err
							return
						}
						_, err = c.Write(msg)
						if err == nil {
							_, err = io.ReadFull(c, buf)
						}
						c.Close()
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		})
	}
}
