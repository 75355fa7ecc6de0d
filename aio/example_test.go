package aio_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// chanSink is a sink backed by a buffered channel (full: rejected).
type chanSink chan sink.Event

func (c chanSink) Enqueue(e sink.Event) error {
	select {
	case c <- e:
		return nil
	default:
		return &sink.RejectError{Sink: "chan", Reason: "full"}
	}
}
func (c chanSink) EnqueueMany(es []sink.Event) error {
	for _, e := range es {
		if err := c.Enqueue(e); err != nil {
			return err
		}
	}
	return nil
}
func (c chanSink) EnqueueLossy(e sink.Event) bool { return c.Enqueue(e) == nil }
func (c chanSink) Prepare([]sink.Event) (sink.Txn, error) {
	return nil, fmt.Errorf("%w: no transactions", sink.ErrRejected)
}
func (c chanSink) Len() int                    { return len(c) }
func (c chanSink) SetPredicate(sink.Predicate) {}
func (c chanSink) Predicate() sink.Predicate   { return nil }

// An echo server as an application stage: the stage receives the
// connections, starts reading each one into its own queue and writes every
// packet back.
func ExampleListen() {
	m := stage.NewManager(stage.Options{})
	var self sink.Sink
	echo, _ := m.CreateStage("Echo", stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			switch v := e.(type) {
			case *aio.Connection:
				_ = v.StartReader(self)
			case aio.Packet:
				if err := v.Conn.Enqueue(v.Data); err != nil {
					return err // refused: the connection is clogged or closed
				}
			case aio.SinkClosed:
				// the connection is gone; per-connection state can go too
			}
		}
		return nil
	}), stage.StageConfig{})
	self = echo.Sink()
	_ = m.Start(context.Background())

	srv, err := aio.Listen(aio.SocketConfig{Addr: "127.0.0.1:0"}, echo.Sink(), aio.Env{Manager: m})
	if err != nil {
		fmt.Println(err)
		return
	}
	c, _ := net.Dial("tcp", srv.Addr().String())
	fmt.Fprint(c, "hello, SEDA")
	buf := make([]byte, len("hello, SEDA"))
	_, _ = io.ReadFull(c, buf)
	fmt.Println(string(buf))
	c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	_ = m.Shutdown(ctx)
	// Output: hello, SEDA
}

// Write completions: a WriteRequest with a Done sink is answered with
// SinkDrained once its bytes have been written to the kernel; Close sends
// everything queued before it.
func ExampleConnection_Enqueue() {
	accepted := make(chanSink, 8)
	srv, _ := aio.Listen(aio.SocketConfig{Addr: "127.0.0.1:0"}, accepted, aio.Env{})
	defer srv.Close()
	client, _ := net.Dial("tcp", srv.Addr().String())
	defer client.Close()

	<-accepted // ListenSucceeded
	conn := (<-accepted).(*aio.Connection)
	done := make(chanSink, 1)
	_ = conn.Enqueue(aio.WriteRequest{Data: []byte("HTTP/1.0 200 OK\r\n\r\nbye\n"), Done: done, Tag: "response"})
	_ = conn.Close()

	d := (<-done).(aio.SinkDrained)
	fmt.Println(d.Tag, d.Bytes)
	all, _ := io.ReadAll(client)
	fmt.Printf("%q\n", all)
	// Output:
	// response 23
	// "HTTP/1.0 200 OK\r\n\r\nbye\n"
}

func ExampleClient_Connect() {
	accepted := make(chanSink, 8)
	srv, _ := aio.Listen(aio.SocketConfig{Addr: "127.0.0.1:0"}, accepted, aio.Env{})
	defer srv.Close()

	cl, _ := aio.NewClient(aio.SocketConfig{}, aio.Env{})
	defer cl.Close()
	events := make(chanSink, 8)
	_ = cl.Connect(srv.Addr().String(), events, "my request")
	conn := (<-events).(*aio.Connection)
	fmt.Println("connected:", conn.Value())
	_ = conn.Enqueue([]byte("ping"))

	<-accepted // ListenSucceeded
	server := (<-accepted).(*aio.Connection)
	packets := make(chanSink, 8)
	_ = server.StartReader(packets)
	p := (<-packets).(aio.Packet)
	fmt.Printf("server got %q (packet %d)\n", p.Data, p.Seq)
	// Output:
	// connected: my request
	// server got "ping" (packet 1)
}

func ExampleFileIO_ReadFile() {
	dir, _ := os.MkdirTemp("", "aio-example")
	defer os.RemoveAll(dir)
	page := filepath.Join(dir, "index.html")
	_ = os.WriteFile(page, []byte("<h1>Haboob</h1>"), 0o644)

	m := stage.NewManager(stage.Options{})
	files, _ := aio.Files(m) // the manager's "aio.file" stage
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())

	done := make(chanSink, 2)
	_ = files.ReadFile(page, done, "GET /")
	_ = files.ReadFile(filepath.Join(dir, "missing.html"), done, "GET /missing")
	for range 2 {
		switch v := (<-done).(type) {
		case aio.FileRead:
			fmt.Printf("%s: %s\n", v.Tag, v.Data)
		case aio.IOError:
			fmt.Printf("%s: not found: %v\n", v.Tag, os.IsNotExist(v.Err))
		}
	}
	// Unordered output:
	// GET /: <h1>Haboob</h1>
	// GET /missing: not found: true
}

func ExampleFileIO_Open() {
	dir, _ := os.MkdirTemp("", "aio-example")
	defer os.RemoveAll(dir)
	m := stage.NewManager(stage.Options{})
	files, _ := aio.NewFileIO(m, aio.FileConfig{})
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())

	// Requests on one file run in order, so a whole session can be queued
	// at once.
	done := make(chanSink, 8)
	f, _ := files.Open(filepath.Join(dir, "log"), os.O_RDWR|os.O_CREATE, 0o644, done, "open")
	_ = f.Write([]byte("first line\n"), "write")
	_ = f.SeekTo(0, io.SeekStart, "rewind")
	_ = f.Read(5, "read")
	_ = f.Read(100, "read rest")
	_ = f.Read(100, "read more")
	_ = f.Close("close")
	for range 7 {
		switch v := (<-done).(type) {
		case aio.IOCompleted:
			fmt.Printf("%-9s %-5s offset %2d %q\n", v.Tag, v.Op, v.Offset, v.Data)
		case aio.EOF:
			fmt.Printf("%-9s EOF\n", v.Tag)
		}
	}
	// Output:
	// open      open  offset  0 ""
	// write     write offset 11 ""
	// rewind    seek  offset  0 ""
	// read      read  offset  5 "first"
	// read rest read  offset 11 " line\n"
	// read more EOF
	// close     close offset  0 ""
}

func ExampleParseConfig() {
	// A configuration file's global.aio block reaches ParseConfig through
	// stage.ParseConfig; a block read on its own, through a stage.Decoder.
	doc, _ := stage.NewDecoder([]byte(strings.TrimSpace(`
readBuffer: 16KiB
idleTimeout: 60s
sockets:
  http: {addr: "127.0.0.1:8080", clogPolicy: close}
`)), "aio.yaml", "global.aio")
	cfg, err := aio.ParseConfig(doc)
	if err != nil {
		fmt.Println(err)
		return
	}
	http, _ := cfg.Socket("http")
	fmt.Println(http.Addr, http.ReadBuffer, http.IdleTimeout, http.ClogPolicy)

	bad, _ := stage.NewDecoder([]byte("sockets:\n  http: {adress: x}\n"), "aio.yaml", "global.aio")
	_, err = aio.ParseConfig(bad)
	fmt.Println(err)
	// Output:
	// 127.0.0.1:8080 16KiB 1m0s close
	// aio.yaml: line 2: global.aio.sockets.http.adress: unknown key (known: addr, clogPolicy, closeTimeout, connectTimeout, eventLoops, idleTimeout, inboundPolicy, keepAlive, lingerTimeout, maxConnections, maxInbound, outputBudget, pollInterval, readBuffer, readRate, recvBuffer, reusePort, sendBuffer, tls, writeThreshold, writeTimeout, writeWindow)
}

// An event loop's value: memory the connections of one loop share, made
// at the first call. Every user of the loop's connections gets the same
// value, so a caller checks its type and falls back on memory of its own
// (also before the connection is on a loop, when it is nil).
func ExampleConnection_LoopValue() {
	type scratch struct{ buf []byte }
	accepted := make(chanSink, 8)
	srv, _ := aio.Listen(aio.SocketConfig{Addr: "127.0.0.1:0", EventLoops: 1}, accepted, aio.Env{})
	defer srv.Close()
	for range 2 {
		c, _ := net.Dial("tcp", srv.Addr().String())
		defer c.Close()
	}
	<-accepted // ListenSucceeded
	scratchOf := func(c *aio.Connection) *scratch {
		s, ok := c.LoopValue(func() any { return &scratch{buf: make([]byte, 0, 4096)} }).(*scratch)
		if !ok {
			s = &scratch{} // not on a loop yet, or the loop's value is another's
		}
		return s
	}
	a := scratchOf((<-accepted).(*aio.Connection))
	b := scratchOf((<-accepted).(*aio.Connection))
	fmt.Println("one loop, one value:", a == b, cap(a.buf))
	// Output: one loop, one value: true 4096
}
