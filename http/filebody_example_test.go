package http_test

import (
	"context"
	"fmt"
	"io"
	nethttp "net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// A response whose body is a region of an open file: on a plain
// connection it is sent with sendfile, the bytes never copied into the
// process. The reply holds one reference to the file; the connection
// releases it once the bytes are sent (or dropped, or not sent at all as
// for HEAD). Another writer, such as an HTTP/2 stream, reads the region
// with ReadAt and releases it itself.
func ExampleNewFileBodyResponse() {
	dir, _ := os.MkdirTemp("", "filebody")
	defer os.RemoveAll(dir)
	name := filepath.Join(dir, "hello.txt")
	_ = os.WriteFile(name, []byte("hello, world\n"), 0o644)
	f, err := os.Open(name)
	if err != nil {
		fmt.Println(err)
		return
	}
	shared := aio.NewSharedFile(f) // one reference: handed to the response

	resp := http.NewFileBodyResponse(http.StatusOK, "text/plain", shared, 7, 5)
	// http.Respond(req, resp) would send it; here a reader reads it by pread.
	body := make([]byte, resp.File.Length)
	_, _ = resp.File.File.ReadAt(body, resp.File.Offset)
	resp.File.File.Release()
	fmt.Printf("%d %q, file closed: %v\n", resp.ContentLength, body, shared.Closed())
	// Output:
	// 5 "world", file closed: true
}

// A handler that serves a file decides by SendsFiles whether to hand the
// connection the open file (sendfile on plain HTTP/1.1, pread chunks on
// HTTP/2) or, over HTTP/1.1 with TLS, a body of its own size (here read
// whole; a large file would be streamed).
func ExampleConnection_SendsFiles() {
	dir, _ := os.MkdirTemp("", "sendsfiles")
	defer os.RemoveAll(dir)
	name := filepath.Join(dir, "hello.txt")
	_ = os.WriteFile(name, []byte("hello, world\n"), 0o644)
	serve := func(req *http.Request) *http.Response {
		if c, ok := req.Conn.(*http.Connection); ok && c.SendsFiles() {
			f, err := os.Open(name)
			if err != nil {
				return http.NewResponse(http.StatusNotFound, "text/plain", nil)
			}
			info, _ := f.Stat()
			resp := http.NewFileBodyResponse(http.StatusOK, "text/plain", aio.NewSharedFile(f), 0, info.Size())
			resp.Header.Add("X-Body", "file")
			return resp
		}
		data, err := os.ReadFile(name)
		if err != nil {
			return http.NewResponse(http.StatusNotFound, "text/plain", nil)
		}
		resp := http.OK("text/plain", data)
		resp.Header.Add("X-Body", "memory")
		return resp
	}

	m := stage.NewManager(stage.Options{})
	files, _ := m.CreateStage("Files", stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			req := e.(*http.Request)
			_ = http.Respond(req, serve(req))
		}
		return nil
	}), stage.StageConfig{})
	_ = m.Start(context.Background())
	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}}, files.Sink(), aio.Env{Manager: m})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &nethttp.Client{Transport: &nethttp.Transport{}}
	resp, err := client.Get("http://" + srv.Addr().String() + "/hello.txt")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	fmt.Print(resp.Status, " ", string(body))
	fmt.Println("body from:", resp.Header.Get("X-Body"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.Shutdown(ctx)
	_ = srv.Shutdown(ctx)
	// Output:
	// 200 OK hello, world
	// body from: file
}
