package http

import (
	"bufio"
	"bytes"
	"fmt"
	nethttp "net/http"
	"strings"
	"testing"
	"time"
)

// browserGET is what a current browser sends for a page.
const browserGET = "GET /articles/2024/seda-revisited.html?ref=front HTTP/1.1\r\n" +
	"Host: www.example.com\r\n" +
	"Connection: keep-alive\r\n" +
	"sec-ch-ua: \"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\"\r\n" +
	"sec-ch-ua-mobile: ?0\r\n" +
	"sec-ch-ua-platform: \"Linux\"\r\n" +
	"Upgrade-Insecure-Requests: 1\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36\r\n" +
	"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8\r\n" +
	"Sec-Fetch-Site: same-origin\r\n" +
	"Sec-Fetch-Mode: navigate\r\n" +
	"Sec-Fetch-User: ?1\r\n" +
	"Sec-Fetch-Dest: document\r\n" +
	"Referer: https://www.example.com/\r\n" +
	"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Accept-Language: en-US,en;q=0.9\r\n" +
	"Cookie: session=0123456789abcdef0123456789abcdef; theme=dark\r\n" +
	"\r\n"

func benchFeed(b *testing.B, in []byte, perFeed int, pieces int) {
	b.Helper()
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	p := &Parser{Now: func() time.Time { return fixedTime }}
	step := (len(in) + pieces - 1) / pieces
	reqs := make([]*Request, 0, perFeed)
	for b.Loop() {
		reqs = reqs[:0]
		var err error
		for off := 0; off < len(in); off += step {
			if reqs, err = p.Feed(reqs, in[off:min(off+step, len(in))]); err != nil {
				b.Fatal(err)
			}
		}
		if len(reqs) != perFeed {
			b.Fatalf("%d requests, want %d", len(reqs), perFeed)
		}
	}
}

func BenchmarkParserBrowserGET(b *testing.B) {
	benchFeed(b, []byte(browserGET), 1, 1)
}

func BenchmarkParserBrowserGETIn4Packets(b *testing.B) {
	benchFeed(b, []byte(browserGET), 1, 4)
}

// BenchmarkParserBrowserGETBytewise feeds one byte at a time, the worst
// case of a slow client; its cost per byte stays flat (no rescanning).
func BenchmarkParserBrowserGETBytewise(b *testing.B) {
	benchFeed(b, []byte(browserGET), 1, len(browserGET))
}

func BenchmarkParserPipelinedGETs(b *testing.B) {
	const n = 16
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "GET /img/%d.png HTTP/1.1\r\nHost: h\r\n\r\n", i)
	}
	benchFeed(b, []byte(in.String()), n, 1)
}

func BenchmarkParserPOST4K(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 4096)
	in := append([]byte("POST /upload HTTP/1.1\r\nHost: h\r\nContent-Type: application/octet-stream\r\nContent-Length: 4096\r\n\r\n"), body...)
	benchFeed(b, in, 1, 1)
}

func BenchmarkParserChunked4K(b *testing.B) {
	var in strings.Builder
	in.WriteString("POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 4 {
		fmt.Fprintf(&in, "400\r\n%s\r\n", strings.Repeat("y", 1024))
	}
	in.WriteString("0\r\n\r\n")
	benchFeed(b, []byte(in.String()), 1, 1)
}

// BenchmarkNetHTTPReadRequestBrowserGET is the standard library reading the
// same request, for reference.
func BenchmarkNetHTTPReadRequestBrowserGET(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(browserGET)))
	r := strings.NewReader(browserGET)
	br := bufio.NewReader(r)
	for b.Loop() {
		r.Reset(browserGET)
		br.Reset(r)
		if _, err := nethttp.ReadRequest(br); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFormatterAppendHeader(b *testing.B) { benchmarkAppendHeader(b, false) }

// BenchmarkFormatterAppendPreparedHeader is BenchmarkFormatterAppendHeader
// with the fields prepared once (a cached page's response).
func BenchmarkFormatterAppendPreparedHeader(b *testing.B) { benchmarkAppendHeader(b, true) }

// benchmarkAppendHeader formats a cached page's 200: Content-Type,
// validators and Accept-Ranges, prepared or not.
func benchmarkAppendHeader(b *testing.B, prepared bool) {
	b.ReportAllocs()
	reqs, err := new(Parser).Feed(nil, []byte(browserGET))
	if err != nil {
		b.Fatal(err)
	}
	resp := OK("text/html; charset=utf-8", make([]byte, 8192))
	resp.Header = append(resp.Header, Field{"Last-Modified", "Fri, 27 Nov 2026 08:00:00 GMT"}, Field{"ETag", `"5f-3e8"`}, Field{"Accept-Ranges", "bytes"})
	if prepared {
		resp.Prepared = PrepareHeader(resp.Header)
	}
	var f Formatter
	buf := make([]byte, 0, 512)
	now := time.Now()
	for b.Loop() {
		buf = f.AppendHeader(buf[:0], resp, reqs[0], now)
	}
}
