// Command tlsstall measures a real TLS client's handshake latency while
// connections that never complete a ClientHello are open to the same
// server: half of them have sent the first 4 bytes of a record header,
// half nothing (the attack of issue 24). Each measured client makes a new
// connection, a full handshake (no session resumption) and one request,
// one after the other.
//
//	go run ./bench/tlsstall -addr 127.0.0.1:8443 -stalled 300 -n 50
//
// It prints one line: the handshake latency's p50, p99 and max, the
// request's (handshake included) p50, and the number of failures.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "the TLS server")
	stalled := flag.Int("stalled", 300, "connections that never complete a ClientHello")
	n := flag.Int("n", 50, "measured handshakes")
	path := flag.String("path", "/small.html", "the path requested after each handshake")
	settle := flag.Duration("settle", 200*time.Millisecond, "pause after opening the stalled connections")
	timeout := flag.Duration("timeout", 10*time.Second, "a measured client's deadline")
	flag.Parse()

	var open []net.Conn
	for i := range *stalled {
		c, err := net.Dial("tcp", *addr)
		if err != nil {
			log.Fatalf("stalled connection %d: %v", i, err)
		}
		if i%2 == 0 {
			if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02}); err != nil {
				log.Fatal(err)
			}
		}
		open = append(open, c)
	}
	time.Sleep(*settle)

	var hs, total []time.Duration
	failures := 0
	for range *n {
		h, t, err := measure(*addr, *path, *timeout)
		if err != nil {
			failures++
			fmt.Fprintln(os.Stderr, "tlsstall:", err)
			continue
		}
		hs = append(hs, h)
		total = append(total, t)
	}
	alive := 0
	for _, c := range open { // how many the server still holds open
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				alive++
			}
		}
		c.Close()
	}
	fmt.Printf("stalled %d (still open %d); handshakes %d; handshake p50 %.2f ms; p99 %.2f ms; max %.2f ms; request p50 %.2f ms; failures %d\n",
		*stalled, alive, len(hs), ms(pct(hs, 50)), ms(pct(hs, 99)), ms(pct(hs, 100)), ms(pct(total, 50)), failures)
	if failures > 0 {
		os.Exit(1)
	}
}

// measure makes one connection: the handshake's latency and the whole
// request's.
func measure(addr, path string, timeout time.Duration) (time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	defer c.Close()
	if err := c.HandshakeContext(ctx); err != nil {
		return 0, 0, fmt.Errorf("handshake: %w", err)
	}
	hs := time.Since(start)
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path); err != nil {
		return 0, 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("response: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("status %s", resp.Status)
	}
	return hs, time.Since(start), nil
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
