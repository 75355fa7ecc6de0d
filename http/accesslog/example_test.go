package accesslog_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/http/accesslog"
	"github.com/sandstorm-go/sandstorm/stage"
)

// A Log takes the server's records (http.ServerConfig{OnResponse:
// log.Record}) and writes them from a stage of its own, off the serving
// path; Close drains the stage and flushes.
func ExampleNew() {
	m := stage.NewManager(stage.Options{})
	log := accesslog.New(os.Stdout, accesslog.Config{})
	if err := log.Attach(m); err != nil {
		fmt.Println(err)
		return
	}
	_ = m.Start(context.Background())
	defer m.Shutdown(context.Background())
	log.Record(http.AccessRecord{
		RemoteAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000},
		Time:       time.Date(2026, 11, 27, 1, 2, 3, 0, time.UTC),
		Method:     "GET", Target: "/index.html", Proto: "HTTP/1.1",
		Status: 200, Bytes: 5120, UserAgent: `curl/8.5.0 "quoted"`,
	})
	_ = log.Close()
	// Output:
	// 192.0.2.7 - - [27/Nov/2026:01:02:03 +0000] "GET /index.html HTTP/1.1" 200 5120 "-" "curl/8.5.0 \"quoted\""
}
