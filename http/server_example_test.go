package http_test

import (
	"context"
	"fmt"
	"io"
	nethttp "net/http"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// An HTTP server on an aio socket hands every parsed request to an
// application stage, which answers on the request's connection.
func ExampleListen() {
	m := stage.NewManager(stage.Options{})
	hello, _ := m.CreateStage("Hello", stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			req := e.(*http.Request)
			_ = http.Respond(req, http.OK("text/plain; charset=utf-8", []byte("hello from "+req.Path+"\n")))
		}
		return nil
	}), stage.StageConfig{})
	_ = m.Start(context.Background())

	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}}, hello.Sink(), aio.Env{Manager: m})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &nethttp.Client{Transport: &nethttp.Transport{}}
	resp, err := client.Get("http://" + srv.Addr().String() + "/world")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))
	fmt.Print(string(body))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.Shutdown(ctx)   // drain the application
	_ = srv.Shutdown(ctx) // then close the connections and the socket
	// Output:
	// 200 OK text/plain; charset=utf-8
	// hello from /world
}
