// Command nonreader measures what clients that never read cost a web
// server: it opens -clients connections to -addr, each with a small
// receive buffer, sends one GET for -path on each, never reads, waits
// -hold, and prints the growth of the server's resident memory (VmRSS of
// -pid, from /proc) between before the first connection and the end of
// the hold, then closes everything.
//
//	nonreader -addr 127.0.0.1:18080 -path /big.bin -pid 1234 -clients 200
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "server address")
	path := flag.String("path", "/big.bin", "the file to request")
	pid := flag.Int("pid", 0, "the server's process id (for VmRSS)")
	clients := flag.Int("clients", 200, "connections that never read")
	hold := flag.Duration("hold", 5*time.Second, "how long the connections stay open after their requests")
	flag.Parse()
	if *pid == 0 {
		log.Fatal("nonreader: -pid is required")
	}
	before, err := rssKiB(*pid)
	if err != nil {
		log.Fatal(err)
	}
	req := "GET " + *path + " HTTP/1.1\r\nHost: bench\r\n\r\n"
	conns := make([]*net.TCPConn, 0, *clients)
	for i := range *clients {
		c, err := net.Dial("tcp", *addr)
		if err != nil {
			log.Fatalf("nonreader: connection %d: %v", i, err)
		}
		tc := c.(*net.TCPConn)
		_ = tc.SetReadBuffer(4 << 10)
		if _, err := tc.Write([]byte(req)); err != nil {
			log.Fatalf("nonreader: request %d: %v", i, err)
		}
		conns = append(conns, tc)
	}
	peak := before
	for end := time.Now().Add(*hold); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if r, err := rssKiB(*pid); err == nil {
			peak = max(peak, r)
		}
	}
	after, err := rssKiB(*pid)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	fmt.Printf("clients %d  RSS before %.1f MB  after %.1f MB  peak %.1f MB  growth %.1f MB (peak %.1f MB)\n",
		*clients, mb(before), mb(after), mb(peak), mb(after-before), mb(peak-before))
}

func mb(kib int64) float64 { return float64(kib) / 1024 }

// rssKiB reads VmRSS of pid, in KiB.
func rssKiB(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("nonreader: no VmRSS for pid %d", pid)
}
