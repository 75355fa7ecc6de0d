// Package accesslog writes an HTTP server's access log from a stage of
// its own, off the serving path (DESIGN §12): the server hands each
// response's facts (http.AccessRecord, through
// http.ServerConfig.OnResponse) to Record, which never blocks and wakes
// no goroutine: it appends the record to a bounded batch that the
// AccessLog stage (Attach creates it on the application's manager) takes
// when it is half full, or 10ms after its first record. The stage formats
// the batch and writes it through a buffered writer, flushed when no
// record is waiting, at least every FlushInterval under steady traffic,
// and on Close. When the buffer is full (the disk is slower than the
// traffic) the record is dropped and counted (Stats.Dropped, the
// registry's "accesslog.dropped"), so that logging never slows responses.
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
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
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

// StageName is the name of the stage Attach creates.
const StageName = "AccessLog"

// Defaults of zero Config fields.
const (
	DefaultBuffer        = 8192
	DefaultWriteBuffer   = 64 << 10
	DefaultFlushInterval = time.Second
	DefaultCloseTimeout  = 10 * time.Second
)

// Config configures a Log; its zero value is usable.
type Config struct {
	Format Format
	// Buffer is how many records may wait for the stage (default
	// DefaultBuffer): half of them in the batch being filled, half in the
	// batch the stage has in hand. Beyond it records are dropped and
	// counted.
	Buffer int
	// WriteBuffer is the size in bytes of the buffered writer in front of
	// the destination (default DefaultWriteBuffer).
	WriteBuffer int
	// FlushInterval bounds how long a line stays in the buffered writer
	// while records keep coming (default DefaultFlushInterval); the
	// writer is flushed whenever the stage's queue runs empty.
	FlushInterval time.Duration
	// CloseTimeout bounds Close's wait for the stage to write the records
	// queued (default DefaultCloseTimeout).
	CloseTimeout time.Duration
}

// Stats counts a Log's records.
type Stats struct {
	Written uint64 // lines formatted into the destination's buffer
	Dropped uint64 // records dropped: the queue was full, or no stage
	Errors  uint64 // writes that failed
}

// Log is an access log: Attach it to a manager, Record from any
// goroutine, Close once.
type Log struct {
	cfg    Config
	w      *bufio.Writer // the stage's (one event at a time), then Close's
	base   io.Writer     // the destination behind w
	closer io.Closer     // the file Open opened, nil for New's writer
	json   *slog.Logger

	// mu guards the records on their way to the stage: Record appends to
	// pending under it and wakes nobody; a half-full pending goes to the
	// stage as one batch, and a timer has the stage take the rest (see
	// stage.go).
	mu      sync.Mutex
	pending []http.AccessRecord
	batches int  // batches handed to the stage and not yet taken
	armed   bool // a tick is on its way to the stage
	closed  bool
	m       *stage.Manager
	queue   sink.Sink    // the stage's; nil before Attach
	timer   *stage.Timer // the last tick armed

	written atomic.Uint64
	dropped atomic.Uint64
	errs    atomic.Uint64
	once    sync.Once
	errMu   sync.Mutex
	err     error // the first write error
}

// New returns a Log writing to w. It writes nothing until Attach gives it
// its stage.
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
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = DefaultCloseTimeout
	}
	l := &Log{cfg: cfg, w: bufio.NewWriterSize(w, cfg.WriteBuffer), base: w}
	if cfg.Format == FormatJSON {
		l.json = slog.New(slog.NewJSONHandler(l.w, nil))
	}
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

// Manager returns the manager Attach gave the log its stage on (nil
// before).
func (l *Log) Manager() *stage.Manager {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m
}

// Record queues one line. It never blocks and wakes no goroutine: it
// appends the record to the batch being filled; when the batch is half
// of Buffer, it hands it to the AccessLog stage. When Buffer records are
// waiting already (the writer is slower than the traffic), or before
// Attach or after Close, the record is dropped and counted. Its signature
// is http.ServerConfig.OnResponse's.
func (l *Log) Record(r http.AccessRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queue == nil || l.closed || len(l.pending) == l.half() {
		l.dropped.Add(1)
		return
	}
	l.pending = append(l.pending, r)
	switch {
	case len(l.pending) == l.half() && l.batches == 0:
		l.handOverLocked()
	case len(l.pending) == 1 && !l.armed:
		l.armLocked()
	}
}

// half is a batch's size: Buffer is one batch in the stage's hands and
// one being filled.
func (l *Log) half() int { return max(l.cfg.Buffer/2, 1) }

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

// Close stops taking records, has the stage write those waiting (within
// CloseTimeout) and flush, destroys it, and closes the file Open opened.
// Records after Close are dropped. It returns the first write error, or
// the stage's if it could not drain in time.
func (l *Log) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true // no tick is armed from now on
		if l.timer != nil {
			l.timer.Stop()
		}
		m, queue := l.m, l.queue
		if queue != nil && len(l.pending) > 0 {
			l.batches++ // the last batch: beyond the bound, Record is over
			if err := queue.Enqueue(l.pending); err != nil {
				l.dropped.Add(uint64(len(l.pending)))
			}
			l.pending = nil
		}
		l.mu.Unlock()
		if queue != nil {
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.CloseTimeout)
			err := m.DestroyStageContext(ctx, StageName)
			cancel()
			if err != nil && !errors.Is(err, stage.ErrNoStage) {
				l.setErr(fmt.Errorf("accesslog: %w", err))
			}
		} else {
			l.flush()
		}
		if l.closer != nil {
			if err := l.closer.Close(); err != nil {
				l.setErr(err)
			}
		}
	})
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

func (l *Log) setErr(err error) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if l.err == nil {
		l.err = err
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
		l.setErr(fmt.Errorf("accesslog: %w", err))
	}
	// bufio keeps the error forever: start over so that a transient
	// failure (a full disk freed) does not stop the log for good.
	l.w.Reset(l.base)
}

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
