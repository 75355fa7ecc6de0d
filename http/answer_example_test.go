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
)

// An answer given on the event loop (ServerConfig.Inline) as a Reply
// value, pointing to a response built once and shared read-only by every
// answer: with no admission predicate on the connection, nothing is
// allocated for the reply.
func ExampleConnection_Answer() {
	hello := http.OK("text/plain", []byte("hello\n")) // never changed once shared
	cfg := http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}}
	cfg.Inline = func(req *http.Request) bool {
		c, ok := req.Conn.(*http.Connection)
		if !ok || req.Path != "/hello" {
			return false // to the server's sink
		}
		_ = c.Answer(http.Reply{Req: req, Resp: hello})
		return true
	}
	srv, err := http.Listen(cfg, sink.NewQueue(0), aio.Env{})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &nethttp.Client{Transport: &nethttp.Transport{}}
	for range 2 {
		resp, err := client.Get("http://" + srv.Addr().String() + "/hello")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.Status, " ", string(body))
	}
	client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	// Output:
	// 200 OK hello
	// 200 OK hello
}
