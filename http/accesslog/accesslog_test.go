package accesslog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	nethttp "net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/http/accesslog"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// combinedRE is the combined log format; quoted fields may hold \" and \\.
var combinedRE = regexp.MustCompile(`^(\S+) - - \[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] "((?:[^"\\]|\\.)*)" (\d{3}) (\d+|-) "((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"$`)

// unescape undoes the escaping of a quoted field.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		if s[i] == 'x' && i+2 < len(s) {
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(v))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func TestAppendCombined(t *testing.T) {
	at := time.Date(2026, 11, 27, 1, 2, 3, 0, time.FixedZone("", 3600))
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}
	for _, tc := range []struct {
		rec  http.AccessRecord
		want string
	}{
		{http.AccessRecord{RemoteAddr: addr, Time: at, Method: "GET", Target: "/a?b=1", Proto: "HTTP/1.1", Status: 200, Bytes: 1024, Referer: "http://r/", UserAgent: "curl/8.5.0"},
			`127.0.0.1 - - [27/Nov/2026:01:02:03 +0100] "GET /a?b=1 HTTP/1.1" 200 1024 "http://r/" "curl/8.5.0"` + "\n"},
		{http.AccessRecord{RemoteAddr: addr, Time: at, Method: "HEAD", Target: "/", Proto: "HTTP/1.0", Status: 304},
			`127.0.0.1 - - [27/Nov/2026:01:02:03 +0100] "HEAD / HTTP/1.0" 304 - "-" "-"` + "\n"},
		{http.AccessRecord{Time: at, Status: 400},
			`- - - [27/Nov/2026:01:02:03 +0100] "-" 400 - "-" "-"` + "\n"},
		{http.AccessRecord{RemoteAddr: addr, Time: at, Method: "GET", Target: `/"x\y`, Proto: "HTTP/1.1", Status: 404, UserAgent: "evil\" \"agent\n127.0.0.1 - - forged\x00é"},
			`127.0.0.1 - - [27/Nov/2026:01:02:03 +0100] "GET /\"x\\y HTTP/1.1" 404 - "-" "evil\" \"agent\x0A127.0.0.1 - - forged\x00\xC3\xA9"` + "\n"},
		{http.AccessRecord{RemoteAddr: &net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}, Time: at, Method: "GET", Target: "/", Proto: "HTTP/1.1", Status: 503},
			`::1 - - [27/Nov/2026:01:02:03 +0100] "GET / HTTP/1.1" 503 - "-" "-"` + "\n"},
	} {
		got := string(accesslog.AppendCombined(nil, &tc.rec))
		if got != tc.want {
			t.Errorf("AppendCombined:\n got %q\nwant %q", got, tc.want)
		}
		if !combinedRE.MatchString(strings.TrimSuffix(got, "\n")) {
			t.Errorf("%q does not parse as combined log format", got)
		}
	}
}

// FuzzAppendCombined: whatever the client sends, a record is one line that
// parses as combined log format and gives back the fields.
func FuzzAppendCombined(f *testing.F) {
	f.Add("GET", "/a?b=1", "curl/8", "http://r/")
	f.Add("GET", `/"\`, "a\"b\\c\n\r\x00\xff", `"`)
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, method, target, agent, referer string) {
		rec := http.AccessRecord{Time: time.Unix(0, 0).UTC(), Method: method, Target: target + "x", Proto: "HTTP/1.1", Status: 200, UserAgent: agent, Referer: referer}
		line := string(accesslog.AppendCombined(nil, &rec))
		if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
			t.Fatalf("not one line: %q", line)
		}
		m := combinedRE.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m == nil {
			t.Fatalf("does not parse: %q", line)
		}
		if got, want := unescape(m[3]), method+" "+target+"x HTTP/1.1"; got != want {
			t.Errorf("request line %q, want %q", got, want)
		}
		if agent != "" && unescape(m[7]) != agent {
			t.Errorf("agent %q, want %q", unescape(m[7]), agent)
		}
		if referer != "" && unescape(m[6]) != referer {
			t.Errorf("referer %q, want %q", unescape(m[6]), referer)
		}
	})
}

// blockingWriter blocks every Write until released.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// startedManager returns a running manager, shut down when the test ends.
func startedManager(t *testing.T) *stage.Manager {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	})
	return m
}

// TestDropsWhenWriterBlocked: with the writer stuck, Record neither blocks
// nor holds more than Buffer records (a batch in the AccessLog stage's
// hands, one being filled): it drops and counts exactly what does not
// fit; records before Attach and after Close are dropped and counted too.
func TestDropsWhenWriterBlocked(t *testing.T) {
	w := &blockingWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	l := accesslog.New(w, accesslog.Config{Buffer: 4, WriteBuffer: 1, FlushInterval: time.Hour})
	rec := http.AccessRecord{Time: time.Now(), Method: "GET", Target: "/", Proto: "HTTP/1.1", Status: 200}
	l.Record(rec) // no stage yet: dropped
	m := startedManager(t)
	if err := l.Attach(m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Stage(accesslog.StageName); !ok {
		t.Fatal("no AccessLog stage")
	}
	l.Record(rec) // the stage takes it on its tick and blocks in Write
	<-w.entered
	for range 4 + 10 {
		l.Record(rec) // 2 handed to the stage, 2 waiting, 10 dropped
	}
	if st := l.Stats(); st.Dropped != 1+10 {
		t.Fatalf("Dropped = %d, want 11", st.Dropped)
	}
	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Stage(accesslog.StageName); ok {
		t.Error("the AccessLog stage outlived Close")
	}
	st := l.Stats()
	if st.Written != 5 || st.Dropped != 11 {
		t.Errorf("Stats = %+v, want 5 written, 11 dropped", st)
	}
	if n := strings.Count(w.buf.String(), "\n"); n != 5 {
		t.Errorf("%d lines written, want 5", n)
	}
	l.Record(rec) // after Close: dropped, no panic
	if st := l.Stats(); st.Dropped != 12 {
		t.Errorf("Dropped after Close = %d, want 12", st.Dropped)
	}
}

// TestBlockedWriterDoesNotSlowResponses: over a real socket, while the
// log's writer is stuck every request is still answered; the lines that
// do not fit in the stage's queue are dropped and counted, on Stats and
// on the registry's accesslog.dropped, and the rest are written once the
// writer moves again.
func TestBlockedWriterDoesNotSlowResponses(t *testing.T) {
	w := &blockingWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	const buffer, n = 8, 60
	l := accesslog.New(w, accesslog.Config{Buffer: buffer, WriteBuffer: 1})
	addr, stop := server(t, l)
	if err := l.Register(l.Manager().Metrics()); err != nil {
		t.Fatal(err)
	}
	client := &nethttp.Client{Transport: &nethttp.Transport{}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i := range n { // every one answered while the writer is stuck
		resp, err := client.Get(fmt.Sprintf("http://%s/p%d", addr, i))
		if err != nil {
			t.Fatalf("request %d with the log's writer blocked: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if i == 0 {
			<-w.entered // the stage holds the first line, stuck in Write
		}
	}
	// The responses are out before their records are made: wait for the
	// last ones to be dropped. Buffer records wait (a batch handed to the
	// stage, a batch filled), one is stuck in Write, the rest is dropped.
	var st accesslog.Stats
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if st = l.Stats(); st.Dropped >= n-1-buffer {
			break
		}
	}
	if st.Dropped != n-1-buffer || st.Written != 0 {
		t.Fatalf("Stats %+v; want %d dropped, none written yet (one line stuck in Write)", st, n-1-buffer)
	}
	if g := l.Manager().Metrics().Get("accesslog.dropped"); g == nil || g.(interface{ Value() int64 }).Value() != int64(st.Dropped) {
		t.Errorf("accesslog.dropped gauge %v, want %d", g, st.Dropped)
	}
	close(w.release)
	stop()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(w.buf.String(), "\n"); got != 1+buffer || l.Stats().Written != 1+buffer {
		t.Errorf("%d lines written (Stats %+v), want %d", got, l.Stats(), 1+buffer)
	}
}

// server runs an HTTP server on loopback whose application answers 200,
// or 503 through Reject for /busy, logging to l. After stop every
// response has been recorded (the client may see a response before its
// record is made).
func server(t *testing.T, l *accesslog.Log) (addr string, stop func()) {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	app, err := m.CreateStage("App", stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			req := e.(*http.Request)
			if req.Path == "/busy" {
				_ = req.Conn.(*http.Connection).Reject(req, 0)
				continue
			}
			_ = http.Respond(req, http.OK("text/plain", []byte("hello "+req.Path)))
		}
		return nil
	}), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Attach(m); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}, OnResponse: l.Record}, app.Sink(), aio.Env{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			_ = m.Shutdown(ctx)
		})
	}
	t.Cleanup(stop)
	return srv.Addr().String(), stop
}

// request sends raw and reads one response's status line.
func request(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// TestServerLogsEveryResponse: over a real socket, every response is one
// line (200s, a 503 rejection, a 400 for garbage), in combined format.
func TestServerLogsEveryResponse(t *testing.T) {
	var out syncBuf
	l := accesslog.New(&out, accesslog.Config{})
	addr, stop := server(t, l)
	client := &nethttp.Client{Transport: &nethttp.Transport{}}
	defer client.CloseIdleConnections()
	const n = 20
	for i := range n {
		req, _ := nethttp.NewRequest("GET", fmt.Sprintf("http://%s/p%d?q=\"x\"", addr, i), nil)
		req.Header.Set("User-Agent", `agent "quoted" \ back`)
		req.Header.Set("Referer", "http://ref/")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := request(t, addr, "GET /busy HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.Contains(got, " 503 ") {
		t.Fatalf("/busy: %q", got)
	}
	if got := request(t, addr, "BAD\x01 / HTTP/1.1\r\n\r\n"); !strings.Contains(got, " 400 ") {
		t.Fatalf("garbage: %q", got)
	}
	stop()
	if err := l.Close(); err != nil { // flushes: the lines are out
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != n+2 {
		t.Fatalf("%d lines for %d responses:\n%s", len(lines), n+2, out.String())
	}
	statuses := map[string]int{}
	for _, line := range lines {
		m := combinedRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not combined log format: %q", line)
		}
		statuses[m[4]]++
		if m[4] != "200" {
			continue
		}
		path, _, _ := strings.Cut(strings.Fields(unescape(m[3]))[1], "?")
		if m[1] != "127.0.0.1" || unescape(m[7]) != `agent "quoted" \ back` || m[6] != "http://ref/" || m[5] != strconv.Itoa(len("hello "+path)) {
			t.Errorf("fields of %q", line)
		}
	}
	if statuses["200"] != n || statuses["503"] != 1 || statuses["400"] != 1 {
		t.Errorf("statuses %v, want %d×200, 1×503, 1×400", statuses, n)
	}
	if st := l.Stats(); st.Written != n+2 || st.Dropped != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

// TestJSONLines: the JSON format gives one object per response, through
// slog's JSON handler.
func TestJSONLines(t *testing.T) {
	var out syncBuf
	l := accesslog.New(&out, accesslog.Config{Format: accesslog.FormatJSON})
	addr, stop := server(t, l)
	for _, raw := range []string{
		"GET /a HTTP/1.1\r\nHost: x\r\nUser-Agent: a\"b\r\nConnection: close\r\n\r\n",
		"GET /busy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
	} {
		request(t, addr, raw)
	}
	stop()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), out.String())
	}
	var recs []map[string]any
	for _, line := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, v)
	}
	if recs[0]["target"] != "/a" || recs[0]["agent"] != `a"b` || recs[0]["status"] != 200.0 || recs[0]["msg"] != "access" ||
		recs[1]["status"] != 503.0 || recs[0]["remote"] != "127.0.0.1" {
		t.Errorf("records %v", recs)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
