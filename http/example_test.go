package http_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
)

// A server stage feeds each packet read from a connection to that
// connection's Parser; requests come out whole, whatever the packet
// boundaries, several at once when they are pipelined.
func ExampleParser_Feed() {
	p := &http.Parser{Conn: "conn-1"}
	packets := []string{
		"GET /index.html HTTP/1.1\r\nHo",
		"st: example.com\r\n\r\nPOST /form HTTP/1.1\r\nHost: example.com\r\nContent-Length: 7\r\n\r\nname=go",
		"GET /bye HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
	}
	var reqs []*http.Request
	for _, packet := range packets {
		var err error
		reqs, err = p.Feed(reqs[:0], []byte(packet))
		for _, r := range reqs {
			fmt.Printf("%v #%d: %s %s body=%q keep-alive=%v\n", r.Conn, r.Seq, r.Method, r.Path, r.Body, r.KeepAlive())
		}
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// conn-1 #0: GET /index.html body="" keep-alive=true
	// conn-1 #1: POST /form body="name=go" keep-alive=true
	// conn-1 #2: GET /bye body="" keep-alive=false
}

// Bad input fails the parser with an error that carries the status to
// answer; the connection is closed after that response.
func ExampleErrorResponse() {
	var p http.Parser
	_, err := p.Feed(nil, []byte("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"))
	fmt.Println(errors.Is(err, http.ErrFraming), http.StatusOf(err))

	resp := http.ErrorResponse(err)
	wire := resp.Append(nil, nil, time.Date(2024, 3, 5, 7, 8, 9, 0, time.UTC))
	fmt.Print(strings.ReplaceAll(string(wire), "\r\n", "\n"))
	// Output:
	// true 400
	// HTTP/1.1 400 Bad Request
	// Date: Tue, 05 Mar 2024 07:08:09 GMT
	// Server: Sandstorm
	// Content-Type: text/plain; charset=utf-8
	// Content-Length: 16
	// Connection: close
	//
	// 400 Bad Request
}

// A Formatter writes the bytes of a response to a request; the header
// fields follow the request's protocol version.
func ExampleFormatter() {
	var p http.Parser
	reqs, _ := p.Feed(nil, []byte("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"))

	f := &http.Formatter{Server: "Haboob"}
	resp := http.OK("text/plain; charset=utf-8", []byte("hello, world\n"))
	wire := f.Append(nil, resp, reqs[0], time.Date(2024, 3, 5, 7, 8, 9, 0, time.UTC))
	fmt.Print(strings.ReplaceAll(string(wire), "\r\n", "\n"))
	// Output:
	// HTTP/1.1 200 OK
	// Date: Tue, 05 Mar 2024 07:08:09 GMT
	// Server: Haboob
	// Content-Type: text/plain; charset=utf-8
	// Content-Length: 13
	// Connection: keep-alive
	//
	// hello, world
}

// The fields a cache sends with every response for one file are
// prepared once, when the file is cached; each response then copies them
// as formatted. The bytes on the wire are those of the Header itself.
func ExamplePrepareHeader() {
	fields := http.Header{
		{Name: "Content-Type", Value: "text/html"},
		{Name: "ETag", Value: `"5f-3e8"`},
		{Name: "Accept-Ranges", Value: "bytes"},
	}
	prepared := http.PrepareHeader(fields) // once per cached file

	var p http.Parser
	reqs, _ := p.Feed(nil, []byte("GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n"))
	f := &http.Formatter{Server: "Haboob"}
	resp := &http.Response{Header: fields, Prepared: prepared, ContentLength: 1000}
	wire := f.AppendHeader(nil, resp, reqs[0], time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC))
	fmt.Print(strings.ReplaceAll(string(wire), "\r\n", "\n"))
	// Output:
	// HTTP/1.1 200 OK
	// Date: Fri, 27 Nov 2026 08:30:00 GMT
	// Server: Haboob
	// Content-Type: text/html
	// ETag: "5f-3e8"
	// Accept-Ranges: bytes
	// Content-Length: 1000
}

// A request rejected by admission control gets 503 with Retry-After.
func ExampleServiceUnavailable() {
	resp := http.ServiceUnavailable(2 * time.Second)
	fmt.Println(resp.Status, resp.Header.Get("Retry-After"))
	// Output:
	// 503 2
}

// For "Expect: 100-continue" the server sends the interim response once the
// header section is accepted, before the client sends the body.
func ExampleParser_TakeContinue() {
	var p http.Parser
	reqs, _ := p.Feed(nil, []byte("PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"))
	if p.TakeContinue() {
		fmt.Printf("%q\n", http.AppendContinue(nil))
	}
	reqs, _ = p.Feed(reqs, []byte("data"))
	fmt.Println(len(reqs), string(reqs[0].Body))
	// Output:
	// "HTTP/1.1 100 Continue\r\n\r\n"
	// 1 data
}

// Header lookups ignore case; repeated fields keep their order.
func ExampleHeader() {
	var h http.Header
	h.Add("accept", "text/html")
	h.Add("Via", "1.1 a")
	h.Add("via", "1.1 b")
	fmt.Println(h.Get("ACCEPT"), h.Values("Via"), h[0].Name)
	// Output:
	// text/html [1.1 a 1.1 b] Accept
}
