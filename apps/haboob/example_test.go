package haboob_test

import (
	"context"
	"fmt"
	"io"
	nethttp "net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Haboob is a stage graph: register its handlers, build the manager from
// the default configuration, start it (HttpRecv opens the socket), and
// shut down in order: the stages, then the server.
func ExampleServer() {
	root, _ := os.MkdirTemp("", "haboob-example")
	defer os.RemoveAll(root)
	_ = os.WriteFile(filepath.Join(root, "index.html"), []byte("<h1>hello, Haboob</h1>\n"), 0o644)

	hb := haboob.New(haboob.Options{Root: root, Addr: "127.0.0.1:0"})
	reg := stage.NewRegistry()
	hb.Register(reg)
	cfg, err := stage.ParseConfig(configs.Haboob, configs.HaboobFile)
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	client := &nethttp.Client{Transport: &nethttp.Transport{}}
	resp, err := client.Get("http://" + hb.Addr().String() + "/")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status, resp.Header.Get("Server"))
		fmt.Print(string(body))
	}
	client.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hb.Shutdown(ctx) // the HTTP server first: its responses need the stages
	_ = m.Shutdown(ctx)
	// Output:
	// 200 OK Haboob
	// <h1>hello, Haboob</h1>
}
