// Command soak runs Haboob for a while under normal load plus the attacks
// of a hostile client, and prints every interval what a reliable server
// keeps flat: its RSS and descriptors, its error and warning log lines,
// and a normal client's latency (p50, p99, max) and errors.
//
//	go run ./bench/soak                       # 10 minutes, report every 10 s
//	go run ./bench/soak -duration 2m
//	go run ./bench/soak -profiler 127.0.0.1:9090   # heap: go tool pprof http://127.0.0.1:9090/debug/pprof/heap
//
// It builds cmd/haboob (or runs -haboob), serves a small generated site
// with the embedded configuration (shutdown 5s) and, where util-linux's
// prlimit exists, under `prlimit --nofile=N` (-nofile, default 1024 as on
// Debian). The attacks, all at once for the whole run:
//
//   - slowloris: connections that send a request one byte every few
//     seconds (the server answers 408 after its requestTimeout);
//   - idle: connections that send nothing;
//   - non-readers: connections that pipeline requests for a 4 MiB file and
//     never read;
//   - big bodies: POSTs of 9 MiB bodies to a static page;
//   - descriptor exhaustion: every -burstEvery, connections beyond the
//     descriptor limit, held for 10 s and closed.
//
// Normal clients are keep-alive clients, each on its own connection,
// fetching pages of 1 KiB and 64 KiB. The process exits 1 if Haboob died
// or a normal client saw an error. Load, attacks and server share the
// machine: latencies are system figures, comparable within one run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	nethttp "net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/internal/clock"
)

type options struct {
	duration, interval, burstEvery time.Duration
	haboob, profiler               string
	nofile                         int
	normal, slowloris, idle        int
	nonReaders, bigBodies, burst   int
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long to run")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "report interval")
	flag.StringVar(&o.haboob, "haboob", "", "haboob binary (default: go build ./cmd/haboob)")
	flag.StringVar(&o.profiler, "profiler", "", "Haboob's profiler dashboard address, with /debug/pprof/ (default: none)")
	flag.IntVar(&o.nofile, "nofile", 1024, "Haboob's descriptor limit (prlimit --nofile; 0: inherit)")
	flag.IntVar(&o.normal, "normal", 8, "normal keep-alive clients")
	flag.IntVar(&o.slowloris, "slowloris", 200, "slowloris connections")
	flag.IntVar(&o.idle, "idle", 200, "idle connections")
	flag.IntVar(&o.nonReaders, "nonreaders", 50, "connections that never read a large file")
	flag.IntVar(&o.bigBodies, "bigbodies", 4, "clients posting 9 MiB bodies")
	flag.IntVar(&o.burst, "burst", 0, "connections of a descriptor-exhaustion burst (0: nofile+100)")
	flag.DurationVar(&o.burstEvery, "burstEvery", 60*time.Second, "period of the descriptor-exhaustion bursts")
	flag.Parse()
	if o.burst == 0 {
		o.burst = o.nofile + 100
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// server is the Haboob process under test.
type server struct {
	cmd    *exec.Cmd
	addr   string
	errs   atomic.Int64 // level=ERROR log lines
	warns  atomic.Int64 // level=WARN log lines
	mu     sync.Mutex
	sample []string // the first error and warning lines
	done   chan struct{}
}

var readyRE = regexp.MustCompile(`msg="haboob: ready" addr=(\S+)`)

func run(o options) error {
	work, err := os.MkdirTemp("", "haboob-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := o.haboob
	if bin == "" {
		bin = filepath.Join(work, "haboob")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/haboob").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/haboob: %v\n%s", err, out)
		}
	}
	root := filepath.Join(work, "site")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	files := map[string]int{"small.html": 1 << 10, "medium.html": 64 << 10, "large.bin": 4 << 20, "index.html": 100}
	for name, size := range files {
		if err := os.WriteFile(filepath.Join(root, name), bytes.Repeat([]byte("x"), size), 0o644); err != nil {
			return err
		}
	}
	cfg := filepath.Join(work, "haboob.yaml")
	text := strings.Replace(string(configs.Haboob), "shutdown: 10s", "shutdown: 5s", 1)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return err
	}
	args := []string{bin, "-config", cfg, "-root", root, "-addr", "127.0.0.1:0", "-profiler", o.profiler}
	limit := "inherited"
	if o.nofile > 0 {
		if p, err := exec.LookPath("prlimit"); err == nil {
			args = append([]string{p, fmt.Sprintf("--nofile=%d", o.nofile)}, args...)
			limit = strconv.Itoa(o.nofile)
		} else {
			fmt.Println("# prlimit not found: Haboob keeps the inherited descriptor limit")
		}
	}
	srv, err := startServer(args)
	if err != nil {
		return err
	}
	defer func() {
		if srv.cmd.ProcessState == nil {
			_ = srv.cmd.Process.Kill()
			<-srv.done
		}
	}()
	fmt.Printf("# haboob pid %d on %s, descriptor limit %s, for %v\n", srv.cmd.Process.Pid, srv.addr, limit, o.duration)
	fmt.Printf("# attacks: %d slowloris, %d idle, %d non-readers (4 MiB), %d big-body posters (9 MiB), a burst of %d connections every %v\n",
		o.slowloris, o.idle, o.nonReaders, o.bigBodies, o.burst, o.burstEvery)

	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	sigs, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	ctx = sigs

	var lat latencies
	var normalErrs, normalOK atomic.Int64
	var lastErr atomic.Value
	var attackConns atomic.Int64
	var wg sync.WaitGroup
	goRun := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	for i := range o.normal {
		goRun(func() { normalClient(ctx, srv.addr, i, &lat, &normalOK, &normalErrs, &lastErr) })
	}
	for range o.slowloris {
		goRun(func() { holdConn(ctx, srv.addr, &attackConns, slowloris) })
	}
	for range o.idle {
		goRun(func() { holdConn(ctx, srv.addr, &attackConns, idle) })
	}
	for range o.nonReaders {
		goRun(func() { holdConn(ctx, srv.addr, &attackConns, nonReader) })
	}
	for range o.bigBodies {
		goRun(func() { bigBody(ctx, srv.addr) })
	}
	goRun(func() { bursts(ctx, srv.addr, o.burst, o.burstEvery, &attackConns) })

	fmt.Printf("%8s %8s %6s %6s %6s %8s %8s %8s %8s %7s %7s\n",
		"elapsed", "rss_MB", "fds", "errLog", "warnLog", "reqs", "errors", "p50_ms", "p99_ms", "max_ms", "attack")
	startT := time.Now()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	var rss0, fds0 int64 = -1, -1
	var rssLast, fdsLast int64
	report := func() {
		rss, fds := procStats(srv.cmd.Process.Pid)
		if rss0 < 0 {
			rss0, fds0 = rss, fds
		}
		rssLast, fdsLast = rss, fds
		p50, p99, mx, n := lat.take()
		fmt.Printf("%8s %8.1f %6d %6d %6d %8d %8d %8.1f %8.1f %7.0f %7d\n",
			time.Since(startT).Round(time.Second), float64(rss)/(1<<20), fds, srv.errs.Load(), srv.warns.Load(),
			n, normalErrs.Load(), p50, p99, mx, attackConns.Load())
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-srv.done:
			break loop
		case <-tick.C:
			report()
		}
	}
	cancel()
	wg.Wait()
	died := false
	select {
	case <-srv.done:
		died = true
	default:
	}
	if !died {
		time.Sleep(2 * time.Second) // let the server see the attackers go
		report()
	}
	fmt.Printf("# normal requests %d ok, %d errors", normalOK.Load(), normalErrs.Load())
	if e, ok := lastErr.Load().(string); ok {
		fmt.Printf(" (last: %s)", e)
	}
	fmt.Println()
	fmt.Printf("# server RSS %.1f → %.1f MB, descriptors %d → %d; log: %d errors, %d warnings\n",
		float64(rss0)/(1<<20), float64(rssLast)/(1<<20), fds0, fdsLast, srv.errs.Load(), srv.warns.Load())
	srv.mu.Lock()
	for _, l := range srv.sample {
		fmt.Println("#   " + l)
	}
	srv.mu.Unlock()
	if died {
		return fmt.Errorf("haboob exited during the soak: %v", srv.cmd.ProcessState)
	}
	_ = srv.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-srv.done:
	case <-time.After(30 * time.Second):
		return errors.New("haboob did not exit within 30 s of SIGINT")
	}
	fmt.Printf("# haboob exit code %d after SIGINT\n", srv.cmd.ProcessState.ExitCode())
	if normalErrs.Load() > 0 {
		return fmt.Errorf("%d normal requests failed", normalErrs.Load())
	}
	return nil
}

func startServer(args []string) (*server, error) {
	s := &server{cmd: exec.Command(args[0], args[1:]...), done: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := readyRE.FindStringSubmatch(line); m != nil {
				ready <- m[1]
			}
			isErr, isWarn := strings.Contains(line, "level=ERROR"), strings.Contains(line, "level=WARN")
			if isErr {
				s.errs.Add(1)
			}
			if isWarn {
				s.warns.Add(1)
			}
			if isErr || isWarn {
				s.mu.Lock()
				if len(s.sample) < 8 {
					s.sample = append(s.sample, line)
				}
				s.mu.Unlock()
			}
		}
		_ = s.cmd.Wait()
		close(s.done)
	}()
	select {
	case s.addr = <-ready:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("haboob exited before it was ready: %v", s.cmd.ProcessState)
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		return nil, errors.New("haboob not ready within 60 s")
	}
}

// procStats reads a process's resident set (bytes) and open descriptors.
func procStats(pid int) (rss, fds int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				rss = kb << 10
			}
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = int64(len(ents))
	}
	return rss, fds
}

// latencies collects a normal client's request times over an interval.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// take returns p50, p99 and max in milliseconds and the count, and resets.
func (l *latencies) take() (p50, p99, mx float64, n int) {
	l.mu.Lock()
	d := l.d
	l.d = nil
	l.mu.Unlock()
	if len(d) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	return ms(d[len(d)/2]), ms(d[(len(d)*99)/100]), ms(d[len(d)-1]), len(d)
}

// normalClient fetches small and medium pages on one keep-alive
// connection, pausing a little between requests.
func normalClient(ctx context.Context, addr string, id int, lat *latencies, ok, errs *atomic.Int64, last *atomic.Value) {
	tr := &nethttp.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	c := &nethttp.Client{Transport: tr, Timeout: 30 * time.Second}
	r := rand.New(rand.NewPCG(uint64(id), 1))
	for ctx.Err() == nil {
		path := "/small.html"
		if r.IntN(4) == 0 {
			path = "/medium.html"
		}
		t0 := time.Now()
		resp, err := c.Get("http://" + addr + path)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("GET %s: %s", path, resp.Status)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			errs.Add(1)
			last.Store(err.Error())
			time.Sleep(100 * time.Millisecond)
			continue
		}
		ok.Add(1)
		lat.add(time.Since(t0))
		time.Sleep(time.Duration(r.IntN(10)) * time.Millisecond)
	}
}

type attack int

const (
	slowloris attack = iota
	idle
	nonReader
)

// holdConn keeps one attacking connection open for the whole run,
// reopening it when the server closes it.
func holdConn(ctx context.Context, addr string, open *atomic.Int64, kind attack) {
	for ctx.Err() == nil {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			clock.Sleep(ctx, time.Second)
			continue
		}
		open.Add(1)
		closed := make(chan struct{})
		go func() { // closes c at the end of the run
			select {
			case <-ctx.Done():
			case <-closed:
			}
			c.Close()
		}()
		switch kind {
		case slowloris:
			req := "GET /small.html HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200) + "\r\n\r\n"
			for i := 0; i < len(req) && ctx.Err() == nil; i++ {
				if _, err := c.Write([]byte{req[i]}); err != nil {
					break
				}
				clock.Sleep(ctx, 3*time.Second)
			}
		case idle:
			_, _ = c.Read(make([]byte, 1)) // until the server closes it
		case nonReader:
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4 << 10)
			}
			// Never read. One more request every 5 s finds out when the
			// server closed the connection (writeTimeout): the write fails
			// (a write that only times out means the connection is open).
			req := []byte("GET /large.bin HTTP/1.1\r\nHost: x\r\n\r\n")
			_, err := c.Write(bytes.Repeat(req, 8))
			for err == nil && clock.Sleep(ctx, 5*time.Second) {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err = c.Write(req); errors.Is(err, os.ErrDeadlineExceeded) {
					err = nil
				}
			}
		}
		close(closed)
		open.Add(-1)
		clock.Sleep(ctx, 100*time.Millisecond)
	}
}

// bigBody posts 9 MiB bodies to a static page, reading the answers.
func bigBody(ctx context.Context, addr string) {
	body := bytes.Repeat([]byte("b"), 9<<20)
	tr := &nethttp.Transport{}
	defer tr.CloseIdleConnections()
	c := &nethttp.Client{Transport: tr, Timeout: 30 * time.Second}
	for ctx.Err() == nil {
		req, _ := nethttp.NewRequestWithContext(ctx, "POST", "http://"+addr+"/index.html", bytes.NewReader(body))
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		clock.Sleep(ctx, 500*time.Millisecond)
	}
}

// bursts opens n connections every period (beyond the server's descriptor
// limit), holds them 10 s and closes them.
func bursts(ctx context.Context, addr string, n int, every time.Duration, open *atomic.Int64) {
	for {
		if !clock.Sleep(ctx, every/2) {
			return
		}
		var conns []net.Conn
		for range n {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		open.Add(int64(len(conns)))
		clock.Sleep(ctx, 10*time.Second)
		for _, c := range conns {
			c.Close()
		}
		open.Add(-int64(len(conns)))
		if !clock.Sleep(ctx, every/2-10*time.Second) {
			return
		}
	}
}
