// Command loadgen is a closed-loop HTTP/1.1 load generator with a
// SPECweb99-like static workload, after the SEDA thesis's Haboob benchmark
// (§6.1.3).
//
//	loadgen gen -dir DIR [-dirs 20]
//	loadgen run -url http://127.0.0.1:8080 [-dirs 20] [-clients 64] [-duration 20s] [-warmup 3s]
//	            [-think 0] [-per-conn 0] [-timeout 30s] [-name server] [-row] [-json FILE]
//	            [-server-pids "PID ..."]
//
// gen writes the file set: DIRS directories, each holding 36 files in four
// size classes (SPECweb99): class 0 from 102 to 921 bytes, class 1 from 1 to
// 9 KiB, class 2 from 10 to 90 KiB, class 3 from 100 to 900 KiB, nine files
// each.
//
// run starts N clients. Each keeps a persistent connection and loops: pick a
// file, send GET, read the whole response, record its latency (including a
// connect when the connection had to be (re)opened), wait the think time,
// repeat. A file is picked like SPECweb99: a directory by Zipf popularity
// (weight 1/rank), a class with probability 35/50/14/1 %, a file of the
// class with SPECweb99's per-file frequencies. -per-conn closes the
// connection after that many requests (the thesis used 5). After a warm-up
// it measures for the duration and prints requests/s, MB/s (response bodies),
// latency percentiles, errors and Jain's fairness index over the requests
// each client completed, (Σx)²/(N·Σx²). -row prints one Markdown table row
// instead. -json also appends the run to FILE as one JSON object per line
// (type Result: the figures above, the mean, and the response-time
// distribution as quantiles), which cmd/sandstorm-plot -bench turns into
// the thesis's Figs. 37, 38 and 40. -server-pids also reports the server's
// CPU time and context switches per request over the measurement, read
// from /proc (two more columns in the row).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Size classes of SPECweb99: file i (0..8) of class c is (i+1)·base[c]
// bytes.
var (
	classBase   = [4]int{102, 1024, 10 * 1024, 100 * 1024}
	classWeight = [4]float64{0.35, 0.50, 0.14, 0.01}
	// fileWeight is SPECweb99's access frequency of the nine files of a
	// class (percent).
	fileWeight = [9]float64{3.9, 5.9, 8.8, 17.7, 35.3, 11.8, 7.1, 5.0, 4.4}
)

const filesPerClass = 9

func dirName(d int) string { return fmt.Sprintf("dir%05d", d) }

func fileName(class, i int) string { return fmt.Sprintf("class%d_%d", class, i) }

func fileSize(class, i int) int { return (i + 1) * classBase[class] }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: loadgen gen -dir DIR [-dirs N] | loadgen run -url URL [flags]")
	os.Exit(2)
}

func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	dir := fs.String("dir", "", "directory to write the file set into")
	dirs := fs.Int("dirs", 20, "number of directories (about 5.1 MB each)")
	_ = fs.Parse(args)
	if *dir == "" || *dirs <= 0 {
		return errors.New("gen needs -dir and a positive -dirs")
	}
	r := rand.New(rand.NewPCG(99, 1))
	var total int64
	for d := range *dirs {
		p := filepath.Join(*dir, dirName(d))
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		for c := range classBase {
			for i := range filesPerClass {
				data := make([]byte, fileSize(c, i))
				for j := range data {
					data[j] = 'a' + byte(r.IntN(26))
				}
				if err := os.WriteFile(filepath.Join(p, fileName(c, i)), data, 0o644); err != nil {
					return err
				}
				total += int64(len(data))
			}
		}
	}
	fmt.Printf("wrote %d files, %.1f MB, in %s\n", *dirs*4*filesPerClass, float64(total)/1e6, *dir)
	return nil
}

// picker draws request paths with the workload's popularity.
type picker struct {
	dirCDF   []float64
	classCDF [4]float64
	fileCDF  [9]float64
}

func cdf(w []float64) []float64 {
	out := make([]float64, len(w))
	var sum float64
	for _, x := range w {
		sum += x
	}
	var acc float64
	for i, x := range w {
		acc += x / sum
		out[i] = acc
	}
	out[len(out)-1] = 1
	return out
}

func newPicker(dirs int) *picker {
	w := make([]float64, dirs)
	for i := range w {
		w[i] = 1 / float64(i+1) // Zipf
	}
	p := &picker{dirCDF: cdf(w)}
	copy(p.classCDF[:], cdf(classWeight[:]))
	copy(p.fileCDF[:], cdf(fileWeight[:]))
	return p
}

func search(c []float64, x float64) int {
	i, _ := slices.BinarySearch(c, x)
	return min(i, len(c)-1)
}

func (p *picker) pick(r *rand.Rand) (dir, class, file int) {
	return search(p.dirCDF, r.Float64()), search(p.classCDF[:], r.Float64()), search(p.fileCDF[:], r.Float64())
}

type config struct {
	addr, host, prefix string
	dirs, clients      int
	duration, warmup   time.Duration
	think, timeout     time.Duration
	perConn            int
}

// clientStats is what one client measured.
type clientStats struct {
	requests  int     // 200 responses in the measurement window
	bytes     int64   // their body bytes
	latencies []int64 // their latencies, in microseconds
	non200    int     // other statuses in the window
	errors    int     // I/O and protocol errors in the window
	connects  int
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	rawURL := fs.String("url", "http://127.0.0.1:8080", "server base URL")
	var cfg config
	fs.IntVar(&cfg.dirs, "dirs", 20, "directories in the file set (as generated)")
	fs.IntVar(&cfg.clients, "clients", 64, "concurrent clients (connections)")
	fs.DurationVar(&cfg.duration, "duration", 20*time.Second, "measurement time")
	fs.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "load before measuring")
	fs.DurationVar(&cfg.think, "think", 0, "think time between a response and the next request")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.IntVar(&cfg.perConn, "per-conn", 0, "requests per connection before reconnecting (0: keep the connection)")
	name := fs.String("name", "", "server name for the report")
	row := fs.Bool("row", false, "print one Markdown table row")
	jsonFile := fs.String("json", "", "append the result to this file as one JSON line")
	serverPIDs := fs.String("server-pids", "", "the server's process ids (space or comma separated): also report its CPU time and context switches per request over the measurement, from /proc")
	_ = fs.Parse(args)
	pids, err := parsePIDs(*serverPIDs)
	if err != nil {
		return err
	}
	u, err := url.Parse(*rawURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("bad -url %q (want http://host:port[/prefix])", *rawURL)
	}
	if cfg.clients <= 0 || cfg.dirs <= 0 || cfg.duration <= 0 {
		return errors.New("-clients, -dirs and -duration must be positive")
	}
	cfg.addr, cfg.host = u.Host, u.Host
	if u.Port() == "" {
		cfg.addr = net.JoinHostPort(u.Hostname(), "80")
	}
	cfg.prefix = u.Path
	if len(cfg.prefix) > 0 && cfg.prefix[len(cfg.prefix)-1] == '/' {
		cfg.prefix = cfg.prefix[:len(cfg.prefix)-1]
	}

	p := newPicker(cfg.dirs)
	start := time.Now()
	measureFrom := start.Add(cfg.warmup)
	end := measureFrom.Add(cfg.duration)
	var stop atomic.Bool
	stats := make([]clientStats, cfg.clients)
	var wg sync.WaitGroup
	for i := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client(&cfg, p, uint64(i), measureFrom, end, &stop, &stats[i])
		}()
	}
	var before, after procSample
	var sampleErr error
	if len(pids) > 0 {
		time.Sleep(time.Until(measureFrom))
		before, sampleErr = sampleProcs(pids)
	}
	time.Sleep(time.Until(end))
	if len(pids) > 0 && sampleErr == nil {
		after, sampleErr = sampleProcs(pids)
	}
	stop.Store(true)
	wg.Wait()
	if sampleErr != nil {
		return fmt.Errorf("sampling the server's /proc: %w", sampleErr)
	}
	r := summarize(stats, cfg.duration)
	if len(pids) > 0 {
		r.serverCPU, r.serverSwitches = serverCost(before, after, r.requests)
	}
	if *jsonFile != "" {
		if err := appendJSON(*jsonFile, newResult(*name, &cfg, r)); err != nil {
			return err
		}
	}
	if *row {
		fmt.Printf("| %s | %d | %.0f | %.1f | %.2f | %.2f | %.2f | %.1f | %d | %.4f |",
			*name, cfg.clients, r.rps, r.mbps, r.p50, r.p90, r.p99, r.max, r.errors, r.fairness)
		if len(pids) > 0 {
			fmt.Printf(" %.1f | %.3f |", r.serverCPU, r.serverSwitches)
		}
		fmt.Println()
		return nil
	}
	fmt.Printf("server %s, %d clients, %v (after %v warm-up), %d dirs\n", *name, cfg.clients, cfg.duration, cfg.warmup, cfg.dirs)
	fmt.Printf("requests %d (%.0f/s), %.1f MB/s, connects %d\n", r.requests, r.rps, r.mbps, r.connects)
	fmt.Printf("latency ms: mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  max %.1f\n", r.mean, r.p50, r.p90, r.p99, r.max)
	fmt.Printf("errors %d (non-200 %d), Jain fairness %.4f\n", r.errors, r.non200, r.fairness)
	if len(pids) > 0 {
		fmt.Printf("server CPU %.1f µs/request, %.3f context switches/request\n", r.serverCPU, r.serverSwitches)
	}
	return nil
}

type report struct {
	requests, errors, non200, connects int
	rps, mbps                          float64
	mean, p50, p90, p99, max           float64 // milliseconds
	fairness                           float64
	cdf                                [][2]float64
	// serverCPU (µs) and serverSwitches are the server's cost per
	// request, with -server-pids.
	serverCPU, serverSwitches float64
}

// cdfQuantiles are the fractions at which the response-time distribution
// is sampled: every percent, then the tail in finer steps.
var cdfQuantiles = func() []float64 {
	var q []float64
	for i := range 100 {
		q = append(q, float64(i)/100)
	}
	return append(q, 0.995, 0.999, 0.9995, 0.9999, 1)
}()

// Result is one run as -json writes it: a line of the output file.
type Result struct {
	Server    string  `json:"server"`
	Clients   int     `json:"clients"`
	Dirs      int     `json:"dirs"`
	DurationS float64 `json:"durationS"`
	ThinkMS   float64 `json:"thinkMs"`
	PerConn   int     `json:"perConn"`
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	Connects  int     `json:"connects"`
	RPS       float64 `json:"rps"`
	MBps      float64 `json:"mbps"`
	MeanMS    float64 `json:"meanMs"`
	P50MS     float64 `json:"p50Ms"`
	P90MS     float64 `json:"p90Ms"`
	P99MS     float64 `json:"p99Ms"`
	MaxMS     float64 `json:"maxMs"`
	Fairness  float64 `json:"fairness"`
	// CDF is the response-time distribution: [milliseconds, fraction of
	// requests answered within it] at the fractions of cdfQuantiles.
	CDF [][2]float64 `json:"cdf"`
	// ServerCPUMicros and ServerSwitches are the server's CPU time (µs)
	// and context switches per request over the measurement, with
	// -server-pids.
	ServerCPUMicros float64 `json:"serverCpuUsPerRequest,omitempty"`
	ServerSwitches  float64 `json:"serverSwitchesPerRequest,omitempty"`
}

func newResult(name string, cfg *config, r report) Result {
	return Result{
		Server: name, Clients: cfg.clients, Dirs: cfg.dirs, DurationS: cfg.duration.Seconds(),
		ThinkMS: float64(cfg.think) / float64(time.Millisecond), PerConn: cfg.perConn,
		Requests: r.requests, Errors: r.errors, Connects: r.connects, RPS: r.rps, MBps: r.mbps,
		MeanMS: r.mean, P50MS: r.p50, P90MS: r.p90, P99MS: r.p99, MaxMS: r.max, Fairness: r.fairness,
		CDF: r.cdf, ServerCPUMicros: r.serverCPU, ServerSwitches: r.serverSwitches,
	}
}

// appendJSON appends res to the file as one line.
func appendJSON(path string, res Result) error {
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func summarize(stats []clientStats, d time.Duration) report {
	var r report
	var bytes int64
	var all []int64
	var sum, sumSq float64
	for _, s := range stats {
		r.requests += s.requests
		r.errors += s.errors + s.non200
		r.non200 += s.non200
		r.connects += s.connects
		bytes += s.bytes
		all = append(all, s.latencies...)
		x := float64(s.requests)
		sum += x
		sumSq += x * x
	}
	r.rps = float64(r.requests) / d.Seconds()
	r.mbps = float64(bytes) / 1e6 / d.Seconds()
	if sumSq > 0 {
		r.fairness = sum * sum / (float64(len(stats)) * sumSq)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(int(p*float64(len(all))), len(all)-1)]) / 1000
	}
	r.p50, r.p90, r.p99 = pct(0.5), pct(0.9), pct(0.99)
	if len(all) > 0 {
		r.max = float64(all[len(all)-1]) / 1000
		var total float64
		for _, l := range all {
			total += float64(l)
		}
		r.mean = total / float64(len(all)) / 1000
		// The smallest latency within which fraction q was answered: the
		// ceil(q·n)-th, and the fastest for q = 0.
		for _, q := range cdfQuantiles {
			i := max(int(math.Ceil(q*float64(len(all))))-1, 0)
			r.cdf = append(r.cdf, [2]float64{float64(all[i]) / 1000, q})
		}
	}
	return r
}

// client runs one closed-loop client until stop.
func client(cfg *config, p *picker, id uint64, measureFrom, end time.Time, stop *atomic.Bool, st *clientStats) {
	r := rand.New(rand.NewPCG(id, 0x5eda))
	var (
		conn  net.Conn
		br    *bufio.Reader
		used  int
		req   []byte
		drain = make([]byte, 64<<10)
	)
	closeConn := func() {
		if conn != nil {
			conn.Close()
			conn = nil
		}
	}
	defer closeConn()
	for !stop.Load() {
		d, c, f := p.pick(r)
		req = fmt.Appendf(req[:0], "GET %s/%s/%s HTTP/1.1\r\nHost: %s\r\n\r\n", cfg.prefix, dirName(d), fileName(c, f), cfg.host)
		t0 := time.Now()
		measuring := t0.After(measureFrom)
		if conn == nil {
			var err error
			conn, err = net.DialTimeout("tcp", cfg.addr, cfg.timeout)
			if err != nil {
				conn = nil
				if measuring && !stop.Load() {
					st.errors++
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if measuring {
				st.connects++
			}
			if br == nil {
				br = bufio.NewReaderSize(conn, 32<<10)
			} else {
				br.Reset(conn)
			}
			used = 0
		}
		deadline := t0.Add(cfg.timeout)
		if deadline.After(end.Add(time.Second)) {
			deadline = end.Add(time.Second) // do not hang past the end of the run
		}
		_ = conn.SetDeadline(deadline)
		status, n, keep, err := roundTrip(conn, br, req, drain)
		lat := time.Since(t0)
		done := t0.Add(lat)
		if err != nil {
			closeConn()
			if measuring && done.Before(end) && !stop.Load() {
				st.errors++
			}
			continue
		}
		used++
		if measuring && done.Before(end) {
			if status == 200 && n == int64(fileSize(c, f)) {
				st.requests++
				st.bytes += n
				st.latencies = append(st.latencies, lat.Microseconds())
			} else {
				st.non200++
			}
		}
		if !keep || cfg.perConn > 0 && used >= cfg.perConn {
			closeConn()
		}
		if cfg.think > 0 {
			time.Sleep(cfg.think)
		}
	}
}

var errProtocol = errors.New("protocol error")

// roundTrip writes req and reads one response, discarding the body. It
// returns the status, the body length and whether the connection may be
// reused.
func roundTrip(conn net.Conn, br *bufio.Reader, req, drain []byte) (status int, n int64, keep bool, err error) {
	if _, err := conn.Write(req); err != nil {
		return 0, 0, false, err
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, 0, false, fmt.Errorf("%w: status line %q", errProtocol, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, 0, false, fmt.Errorf("%w: status line %q", errProtocol, line)
	}
	keep = line[7] == '1'
	length := int64(-1)
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, 0, false, fmt.Errorf("%w: header %q", errProtocol, h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil {
				return 0, 0, false, fmt.Errorf("%w: Content-Length %q", errProtocol, value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, 0, false, fmt.Errorf("%w: chunked responses are not supported", errProtocol)
		}
	}
	if status == 204 || status == 304 || status < 200 {
		return status, 0, keep, nil
	}
	if length < 0 {
		n, err := io.CopyBuffer(io.Discard, br, drain)
		return status, n, false, err
	}
	for n < length {
		m, err := br.Read(drain[:min(int64(len(drain)), length-n)])
		n += int64(m)
		if err != nil {
			return 0, n, false, err
		}
	}
	return status, n, keep, nil
}
