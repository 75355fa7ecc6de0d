package nethttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/nethttp"
	"github.com/sandstorm-go/sandstorm/stage"
)

type Greeting struct {
	Name string `json:"name"`
}

type Reply struct {
	Text string `json:"text"`
}

// ExampleJSON serves a JSON API through a stage: the stage's predicate
// admits requests (503 + Retry-After when it refuses), its pool serves
// them, and Timeout turns a late answer into 504.
func ExampleJSON() {
	m := stage.NewManager(stage.Options{})
	greet, _ := m.CreateStage("Greet", stage.TypedFunc(func(batch []*stage.Request[Greeting, Reply]) error {
		for _, r := range batch {
			r.Reply(Reply{Text: "hello, " + r.Value.Name})
		}
		return nil
	}), stage.StageConfig{Queue: stage.QueueConfig{Threshold: 1000}})
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())

	api := nethttp.JSON[Greeting, Reply](greet.Sink())
	api.Timeout = 2 * time.Second
	mux := http.NewServeMux()
	mux.Handle("POST /greet", api)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/greet", "application/json", strings.NewReader(`{"name":"Go"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output: 200 {"text":"hello, Go"}
}

// ExampleMiddleware puts an existing http.Handler behind a stage: the
// stage's predicate admits, its goroutines run the handler.
func ExampleMiddleware() {
	m := stage.NewManager(stage.Options{})
	web, _ := m.CreateStage("Web", nethttp.Serve(), stage.StageConfig{ThreadPool: stage.ThreadPoolConfig{Max: 8}})
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	srv := httptest.NewServer(nethttp.Middleware(web.Sink(), time.Second, 0)(hello))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output: 200 hello
}
