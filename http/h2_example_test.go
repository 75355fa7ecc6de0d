package http_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"time"

	"golang.org/x/net/http2"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
	"github.com/sandstorm-go/sandstorm/sink"
)

// The same server speaks HTTP/2 to a client that starts with the HTTP/2
// preface (h2c with prior knowledge; over TLS, h2 is chosen by ALPN).
// Each stream's request is a *Request event like an HTTP/1.1 one; the
// H2Config bounds what one connection may do.
func ExampleH2Config() {
	srv, err := http.Listen(http.ServerConfig{
		Socket: aio.SocketConfig{Addr: "127.0.0.1:0"},
		HTTP2:  http.H2Config{MaxConcurrentStreams: 64, MaxResetsPerSecond: 100},
		Inline: func(req *http.Request) bool {
			_ = http.Respond(req, http.OK("text/plain", []byte(req.Proto+" "+req.Path+"\n")))
			return true
		},
	}, sink.NewQueue(1), aio.Env{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	tr := &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	defer tr.CloseIdleConnections()
	client := &nethttp.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + srv.Addr().String() + "/stream")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.Proto, " ", resp.Status, ": ", string(body))
	st := srv.Stats().HTTP2
	fmt.Println("h2 connections:", st.Connections, "streams:", st.Streams)
	// Output:
	// HTTP/2.0 200 OK: HTTP/2.0 /stream
	// h2 connections: 1 streams: 1
}

// A handler doing long work for an HTTP/2 request watches the request's
// Context: the client resetting the stream (here, cancelling its
// request) cancels it with ErrStreamReset, while the connection and its
// other streams go on.
func ExampleErrStreamReset() {
	arrived := make(chan struct{})
	causes := make(chan error, 1)
	srv, err := http.Listen(http.ServerConfig{
		Socket: aio.SocketConfig{Addr: "127.0.0.1:0"},
		Inline: func(req *http.Request) bool {
			ctx := req.Context()
			go func() { // the long work, which stops when ctx ends
				<-ctx.Done()
				causes <- context.Cause(ctx)
				_ = http.Respond(req, http.OK("text/plain", nil)) // too late: dropped
			}()
			close(arrived)
			return true
		},
	}, sink.NewQueue(1), aio.Env{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	tr := h2test.Transport() // an h2c client, as in ExampleH2Config
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel() // the client gives up: RST_STREAM
	}()
	req, _ := nethttp.NewRequestWithContext(ctx, "GET", "http://"+srv.Addr().String()+"/slow", nil)
	if _, err := tr.RoundTrip(req); err == nil {
		fmt.Println("answered?")
	}
	fmt.Println("stream reset:", errors.Is(<-causes, http.ErrStreamReset))
	// Output:
	// stream reset: true
}
