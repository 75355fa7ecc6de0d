// Package accesslog writes an HTTP server's access log off the serving
// path (DESIGN §12): the server hands each response's facts
// (http.AccessRecord, through http.ServerConfig.OnResponse) to Record,
// which never blocks and wakes nobody: it appends the record to a bounded
// batch that one writer goroutine, owned by the Log, takes every 10ms (or
// as soon as it is half full), formats and writes through a buffered
// writer, flushed every FlushInterval and on Close. When the
// buffer is full (the disk is slower than the traffic) the record is
// dropped and counted (Stats.Dropped, the registry's
// "accesslog.dropped"), so that logging never slows responses.
//
// Lines are in the combined log format of Apache and nginx:
//
//	127.0.0.1 - - [27/Nov/2026:01:02:03 +0000] "GET /a?b=1 HTTP/1.1" 200 1024 "http://ref/" "curl/8.5.0"
//
// or, with FormatJSON, JSON lines written through log/slog's JSON handler
// (keys time, level, msg, remote, method, target, proto, status, bytes,
// referer, agent, duration_us, tls).
package accesslog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/http"
)

// Format selects the line format.
type Format int

const (
	// FormatCombined is the combined log format (the default).
	FormatCombined Format = iota
	// FormatJSON is one JSON object per line, through log/slog.
	FormatJSON
)

// ParseFormat reads a format name: "combined" (or "") or "json".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "combined":
		return FormatCombined, nil
	case "json":
		return FormatJSON, nil
	}
	return 0, fmt.Errorf("accesslog: format %q: want combined or json", s)
}

// Defaults of zero Config fields.
const (
	DefaultBuffer        = 8192
	DefaultWriteBuffer   = 64 << 10
	DefaultFlushInterval = time.Second
)

// Config configures a Log; its zero value is usable.
type Config struct {
	Format Format
	// Buffer is how many records may wait for the writer (default
	// DefaultBuffer); beyond it records are dropped and counted.
	Buffer int
	// WriteBuffer is the size in bytes of the buffered writer in front of
	// the destination (default DefaultWriteBuffer).
	WriteBuffer int
	// FlushInterval is how often buffered lines are flushed (default
	// DefaultFlushInterval).
	FlushInterval time.Duration
}

// Stats counts a Log's records.
type Stats struct {
	Written uint64 // lines formatted into the destination's buffer
	Dropped uint64 // records dropped because the buffer was full
	Errors  uint64 // writes that failed
}

// Log is an access log: Record from any goroutine; Close once.
type Log struct {
	cfg  Config
	quit chan struct{}
	wake chan struct{} // a batch is half full: the writer should take it

	// mu guards pending and closed: the records waiting for the writer.
	// Record appends under it (no goroutine is woken per record: the
	// writer takes the whole batch on its tick, or when the batch is half
	// full); the writer swaps the batch out.
	mu      sync.Mutex
	pending []http.AccessRecord
	closed  bool
	done    chan struct{}
	w       *bufio.Writer
	base    io.Writer // the destination behind w
	closer  io.Closer // the file Open opened, nil for New's writer
	json    *slog.Logger

	written atomic.Uint64
	dropped atomic.Uint64
	errs    atomic.Uint64
	once    sync.Once
	err     error // the writer goroutine's first write error (read after done)
}

// New returns a Log writing to w and starts its writer goroutine.
func New(w io.Writer, cfg Config) *Log {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.WriteBuffer <= 0 {
		cfg.WriteBuffer = DefaultWriteBuffer
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	l := &Log{
		cfg:     cfg,
		pending: make([]http.AccessRecord, 0, cfg.Buffer),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		w:       bufio.NewWriterSize(w, cfg.WriteBuffer),
		base:    w,
	}
	if cfg.Format == FormatJSON {
		l.json = slog.New(slog.NewJSONHandler(l.w, nil))
	}
	go l.run()
	return l
}

// Open opens path for appending (created 0644) and returns a Log writing
// to it; "-" writes to standard error. Close closes the file.
func Open(path string, cfg Config) (*Log, error) {
	if path == "-" {
		return New(os.Stderr, cfg), nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("accesslog: %w", err)
	}
	l := New(f, cfg)
	l.closer = f
	return l, nil
}

// Record queues one line. It never blocks: when the buffer is full, or
// the Log is closed, the record is dropped and counted. Its signature is
// http.ServerConfig.OnResponse's.
func (l *Log) Record(r http.AccessRecord) {
	l.mu.Lock()
	if l.closed || len(l.pending) == l.cfg.Buffer {
		l.mu.Unlock()
		l.dropped.Add(1)
		return
	}
	l.pending = append(l.pending, r)
	half := len(l.pending) == max(l.cfg.Buffer/2, 1)
	l.mu.Unlock()
	if half {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// Stats returns the counts so far.
func (l *Log) Stats() Stats {
	return Stats{Written: l.written.Load(), Dropped: l.dropped.Load(), Errors: l.errs.Load()}
}

// Register adds gauges of the counts to a go-metrics registry (the
// manager's, which the profiler exports): accesslog.written,
// accesslog.dropped and accesslog.errors.
func (l *Log) Register(r metrics.Registry) error {
	return errors.Join(
		r.Register("accesslog.written", metrics.NewFunctionalGauge(func() int64 { return int64(l.written.Load()) })),
		r.Register("accesslog.dropped", metrics.NewFunctionalGauge(func() int64 { return int64(l.dropped.Load()) })),
		r.Register("accesslog.errors", metrics.NewFunctionalGauge(func() int64 { return int64(l.errs.Load()) })),
	)
}

// Close writes the records already queued, flushes, stops the writer
// goroutine and closes the file Open opened. Records after Close are
// dropped. It returns the first write error, if any.
func (l *Log) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.quit)
		<-l.done
		if l.closer != nil {
			if err := l.closer.Close(); err != nil && l.err == nil {
				l.err = err
			}
		}
	})
	return l.err
}

// drainEvery is how often the writer takes the records waiting, when the
// batch has not filled up to half before.
const drainEvery = 10 * time.Millisecond

// run is the writer goroutine: it owns w and the batch it swapped out.
func (l *Log) run() {
	defer close(l.done)
	drain := time.NewTicker(drainEvery)
	defer drain.Stop()
	lastFlush := time.Now()
	var line []byte
	batch := make([]http.AccessRecord, 0, l.cfg.Buffer)
	take := func() {
		l.mu.Lock()
		batch, l.pending = l.pending, batch[:0]
		l.mu.Unlock()
		for i := range batch {
			line = l.write(line, &batch[i])
			batch[i] = http.AccessRecord{} // let the requests' strings go
		}
	}
	for {
		select {
		case <-l.wake:
			take()
		case now := <-drain.C:
			take()
			if now.Sub(lastFlush) >= l.cfg.FlushInterval {
				l.flush()
				lastFlush = now
			}
		case <-l.quit:
			take() // Record adds nothing once closed is set
			l.flush()
			return
		}
	}
}

func (l *Log) write(line []byte, r *http.AccessRecord) []byte {
	var err error
	if l.json != nil {
		l.json.LogAttrs(context.Background(), slog.LevelInfo, "access",
			slog.String("remote", remoteHost(r.RemoteAddr)),
			slog.Time("received", r.Time),
			slog.String("method", r.Method),
			slog.String("target", r.Target),
			slog.String("proto", r.Proto),
			slog.Int("status", r.Status),
			slog.Int64("bytes", r.Bytes),
			slog.String("referer", r.Referer),
			slog.String("agent", r.UserAgent),
			slog.Int64("duration_us", r.Duration.Microseconds()),
			slog.Bool("tls", r.TLS),
		)
		// slog's handler reports no error from a bufio.Writer until Flush.
	} else {
		line = AppendCombined(line[:0], r)
		_, err = l.w.Write(line)
	}
	if err != nil {
		l.fail(err)
		return line
	}
	l.written.Add(1)
	return line
}

func (l *Log) flush() {
	if l.w.Buffered() == 0 {
		return
	}
	if err := l.w.Flush(); err != nil {
		l.fail(err)
	}
}

func (l *Log) fail(err error) {
	if l.errs.Add(1) == 1 {
		l.err = fmt.Errorf("accesslog: %w", err)
	}
	// bufio keeps the error forever: start over so that a transient
	// failure (a full disk freed) does not stop the log for good.
	l.w.Reset(l.dest())
}

// dest returns the writer behind w.
func (l *Log) dest() io.Writer { return l.base }

// AppendCombined appends r as one line of the combined log format,
// newline included:
//
//	host - - [02/Jan/2006:15:04:05 -0700] "METHOD TARGET PROTO" status bytes "referer" "agent"
//
// Unknown fields are "-"; the quoted fields escape '"', '\\' and bytes
// that are not printable ASCII as \" \\ and \xHH (as nginx does), so that
// a hostile user agent or target cannot forge a second line or end a
// field early. The request line of a request that did not parse is "-".
func AppendCombined(b []byte, r *http.AccessRecord) []byte {
	b = append(b, remoteHost(r.RemoteAddr)...)
	b = append(b, " - - ["...)
	b = r.Time.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, "] \""...)
	if r.Method == "" && r.Target == "" {
		b = append(b, '-')
	} else {
		b = appendEscaped(b, r.Method)
		b = append(b, ' ')
		b = appendEscaped(b, r.Target)
		b = append(b, ' ')
		b = appendEscaped(b, r.Proto)
	}
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	if r.Bytes > 0 {
		b = strconv.AppendInt(b, r.Bytes, 10)
	} else {
		b = append(b, '-')
	}
	b = append(b, " \""...)
	b = appendField(b, r.Referer)
	b = append(b, "\" \""...)
	b = appendField(b, r.UserAgent)
	return append(b, "\"\n"...)
}

// appendField is appendEscaped with "-" for an empty value.
func appendField(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return appendEscaped(b, s)
}

const hexDigits = "0123456789ABCDEF"

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}

// remoteHost is the client's address without its port ("-" if unknown).
func remoteHost(a net.Addr) string {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return "-"
	}
	s := a.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	if s == "" {
		return "-"
	}
	return s
}
