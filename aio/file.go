package aio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/clock"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// File errors; IOError.Err wraps them (and the fs error underneath).
var (
	// ErrIsDirectory: Open or ReadFile was given a directory.
	ErrIsDirectory = errors.New("aio: is a directory")
	// ErrFileTooLarge: ReadFile met a file larger than MaxReadFile.
	ErrFileTooLarge = errors.New("aio: file too large")
	// ErrNotOpen: a request on a File whose Open failed (wrapping why).
	ErrNotOpen = errors.New("aio: file not open")
	// ErrFileClosed (with sink.ErrClosed) is returned for requests made
	// after Close.
	ErrFileClosed = errors.New("aio: file closed")
)

// Op names a file operation.
type Op uint8

// File operations.
const (
	OpOpen Op = iota + 1
	OpRead
	OpWrite
	OpSeek
	OpStat
	OpFlush
	OpClose
	OpReadFile
)

func (o Op) String() string {
	switch o {
	case OpOpen:
		return "open"
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpSeek:
		return "seek"
	case OpStat:
		return "stat"
	case OpFlush:
		return "flush"
	case OpClose:
		return "close"
	case OpReadFile:
		return "readfile"
	}
	return "unknown"
}

// IOCompleted completes a file request.
type IOCompleted struct {
	File   *File
	Op     Op
	Data   []byte      // OpRead: the bytes read (fewer than asked only at end of file)
	N      int         // bytes read or written
	Offset int64       // the file offset after the operation
	Info   fs.FileInfo // OpOpen and OpStat
	Tag    any
}

// EOF completes a Read at the end of the file (no bytes read).
type EOF struct {
	File   *File
	Offset int64
	Tag    any
}

// IOError completes a file request that failed. Err wraps the fs error
// (errors.Is(err, fs.ErrNotExist), ...) or ErrIsDirectory, ErrNotOpen,
// ErrFileTooLarge.
type IOError struct {
	File *File // nil for ReadFile
	Path string
	Op   Op
	Err  error
	Tag  any
}

func (e IOError) Error() string { return fmt.Sprintf("aio: %s %s: %v", e.Op, e.Path, e.Err) }

// Unwrap returns Err.
func (e IOError) Unwrap() error { return e.Err }

// FileRead completes a ReadFile: the whole file.
type FileRead struct {
	Path string
	Data []byte
	Info fs.FileInfo
	Tag  any
}

// FileStats are the asyncFile stage's counters.
type FileStats struct {
	Requests  uint64 // requests accepted
	Completed uint64 // completion events delivered (IOCompleted, EOF, FileRead, FileOpened)
	Errors    uint64 // IOError events delivered
	Lost      uint64 // completions no sink would take
	Open      int    // files open now
}

// FileIO is asyncFile (Sandstorm's asyncFileIO): file operations as
// requests to one stage that wraps blocking system calls with a thread pool
// sized by the thread-pool controller. Requests on the same File run one at
// a time, in order; different files proceed in parallel. Completions go to
// the sink given at Open (or to ReadFile).
//
// A FileIO is safe for concurrent use. Use From inside a stage so that the
// requests are traced as edges of the stage graph and keep flowing while the
// manager drains at shutdown.
type FileIO struct {
	core *fileCore
	in   sink.Sink // where requests enter the stage
}

type fileCore struct {
	cfg   FileConfig
	st    *stage.Stage
	ctx   context.Context // the manager's run context (set by Init)
	sctx  *stage.Context  // the stage's (set by Init): completions are traced from it
	log   *slog.Logger
	mu    sync.Mutex
	open  map[*File]struct{}
	stats struct {
		requests, completed, errors, lost atomic.Uint64
	}
}

// NewFileIO creates the asyncFile stage in m (named cfg.Stage, default
// "aio.file"). It fails if a stage of that name exists; Files returns the
// existing one instead.
func NewFileIO(m *stage.Manager, cfg FileConfig) (*FileIO, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: NewFileIO needs a manager", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	core := &fileCore{cfg: cfg, open: map[*File]struct{}{}, ctx: context.Background(), log: m.Logger()}
	sc := stage.StageConfig{
		Queue:      cfg.Queue,
		ThreadPool: cfg.ThreadPool,
		// One file per worker at a time: a bigger batch would serialize
		// different files on one goroutine.
		Batching: stage.BatchingConfig{Max: 1},
	}
	st, err := m.CreateStage(cfg.Stage, &fileHandler{core: core}, sc)
	if err != nil {
		return nil, fmt.Errorf("aio: file stage: %w", err)
	}
	core.st = st
	return &FileIO{core: core, in: st.Sink()}, nil
}

// Files returns the manager's asyncFile stage, creating it from the
// `global.aio.file` configuration if it does not exist yet.
func Files(m *stage.Manager) (*FileIO, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: Files needs a manager", ErrInvalidConfig)
	}
	cfg, err := ConfigOf(m)
	if err != nil {
		return nil, err
	}
	name := cfg.File.withDefaults().Stage
	for range 2 {
		if st, ok := m.Stage(name); ok {
			h, ok := st.Handler().(*fileHandler)
			if !ok {
				return nil, fmt.Errorf("%w: stage %q exists and is not the asyncFile stage", ErrInvalidConfig, name)
			}
			return &FileIO{core: h.core, in: st.Sink()}, nil
		}
		fio, err := NewFileIO(m, cfg.File)
		if !errors.Is(err, stage.ErrStageExists) {
			return fio, err
		}
	}
	return nil, fmt.Errorf("aio: file stage %q: creation raced", name)
}

// From returns a view of fio whose requests enter the stage through c's
// traced sink (an edge from c's stage to the file stage).
func (fio *FileIO) From(c *stage.Context) (*FileIO, error) {
	s, err := c.Sink(fio.core.cfg.Stage)
	if err != nil {
		return nil, err
	}
	return &FileIO{core: fio.core, in: s}, nil
}

// Stage returns the asyncFile stage.
func (fio *FileIO) Stage() *stage.Stage { return fio.core.st }

// Stats returns the counters.
func (fio *FileIO) Stats() FileStats {
	c := fio.core
	c.mu.Lock()
	n := len(c.open)
	c.mu.Unlock()
	return FileStats{
		Requests:  c.stats.requests.Load(),
		Completed: c.stats.completed.Load(),
		Errors:    c.stats.errors.Load(),
		Lost:      c.stats.lost.Load(),
		Open:      n,
	}
}

// File is a file handle of asyncFile. Its requests (Read, Write, SeekTo,
// Stat, Flush, Close) return at once; each one's completion (IOCompleted,
// EOF or IOError, carrying the request's tag) goes to the File's sink, in
// request order. A request method returns an error only when the request
// was not accepted: the stage queue refused it (sink.ErrRejected), too many
// requests are pending on the file, or the file was closed.
type File struct {
	core *fileCore
	in   sink.Sink
	name string
	done Receiver

	mu      sync.Mutex
	q       deque[fileReq]
	running bool // the file is queued on the stage or a worker runs it
	closing bool

	// Worker only (one worker at a time).
	f       *os.File
	openErr error
}

type fileReq struct {
	op     Op
	n      int
	data   []byte
	off    int64
	whence int
	flag   int
	perm   fs.FileMode
	tag    any
}

// Open opens name with os.OpenFile's flag and perm; done receives
// IOCompleted{Op: OpOpen, Info} or IOError (a missing file wraps
// fs.ErrNotExist; a directory is ErrIsDirectory), then the completions of
// every later request on the File.
func (fio *FileIO) Open(name string, flag int, perm fs.FileMode, done Receiver, tag any) (*File, error) {
	if done == nil {
		return nil, fmt.Errorf("%w: Open needs a completion sink", ErrBadEvent)
	}
	f := &File{core: fio.core, in: fio.in, name: name, done: done}
	if err := f.submit(fileReq{op: OpOpen, flag: flag, perm: perm, tag: tag}); err != nil {
		return nil, err
	}
	return f, nil
}

// ReadFile reads the whole named file (up to MaxReadFile) and delivers
// FileRead or IOError to done.
func (fio *FileIO) ReadFile(name string, done Receiver, tag any) error {
	if done == nil {
		return fmt.Errorf("%w: ReadFile needs a completion sink", ErrBadEvent)
	}
	if err := fio.in.Enqueue(&readFileReq{name: name, done: done, tag: tag}); err != nil {
		return fmt.Errorf("aio: readfile %s: %w", name, err)
	}
	fio.core.stats.requests.Add(1)
	return nil
}

// OpenShared opens the named file read-only to be shared (SharedFile):
// sent by several connections with sendfile, read with pread. done
// receives FileOpened, holding one reference, or IOError{Op: OpOpen} (a
// directory is ErrIsDirectory). The open and its fstat are the blocking
// calls; what is done with the file after them is not.
func (fio *FileIO) OpenShared(name string, done Receiver, tag any) error {
	if done == nil {
		return fmt.Errorf("%w: OpenShared needs a completion sink", ErrBadEvent)
	}
	if err := fio.in.Enqueue(&openSharedReq{name: name, done: done, tag: tag}); err != nil {
		return fmt.Errorf("aio: open %s: %w", name, err)
	}
	fio.core.stats.requests.Add(1)
	return nil
}

// FileOpened completes OpenShared: the open file, with one reference for
// the receiver, and its metadata from fstat.
type FileOpened struct {
	Path string
	File *SharedFile
	Info fs.FileInfo
	Tag  any
}

type openSharedReq struct {
	name string
	done Receiver
	tag  any
}

// openShared opens a file for OpenShared.
func openShared(r *openSharedReq) sink.Event {
	fail := func(err error) sink.Event {
		return IOError{Path: r.name, Op: OpOpen, Err: err, Tag: r.tag}
	}
	fh, err := os.Open(r.name)
	if err != nil {
		return fail(err)
	}
	info, err := fh.Stat()
	if err == nil && info.IsDir() {
		err = fmt.Errorf("%w: %w", ErrIsDirectory, &fs.PathError{Op: "open", Path: r.name, Err: syscall.EISDIR})
	}
	if err != nil {
		_ = fh.Close()
		return fail(err)
	}
	return FileOpened{Path: r.name, File: NewSharedFile(fh), Info: info, Tag: r.tag}
}

type readFileReq struct {
	name string
	done Receiver
	tag  any
}

// Name is the name given to Open.
func (f *File) Name() string { return f.name }

// Read reads up to n bytes at the current offset: IOCompleted with Data
// (short only at end of file), or EOF when nothing is left.
func (f *File) Read(n int, tag any) error {
	if n <= 0 {
		return fmt.Errorf("%w: read of %d bytes", ErrBadEvent, n)
	}
	return f.submit(fileReq{op: OpRead, n: n, tag: tag})
}

// Write writes p at the current offset. p must not change until the
// completion.
func (f *File) Write(p []byte, tag any) error {
	return f.submit(fileReq{op: OpWrite, data: p, tag: tag})
}

// SeekTo sets the offset like os.File.Seek; IOCompleted.Offset is the new
// offset.
func (f *File) SeekTo(offset int64, whence int, tag any) error {
	if whence != io.SeekStart && whence != io.SeekCurrent && whence != io.SeekEnd {
		return fmt.Errorf("%w: seek whence %d", ErrBadEvent, whence)
	}
	return f.submit(fileReq{op: OpSeek, off: offset, whence: whence, tag: tag})
}

// Stat delivers IOCompleted with Info.
func (f *File) Stat(tag any) error { return f.submit(fileReq{op: OpStat, tag: tag}) }

// Flush commits the file to stable storage (fsync).
func (f *File) Flush(tag any) error { return f.submit(fileReq{op: OpFlush, tag: tag}) }

// Close closes the file after the requests before it; later requests are
// refused.
func (f *File) Close(tag any) error { return f.submit(fileReq{op: OpClose, tag: tag}) }

// submit appends req to the file's FIFO and, if no worker has the file,
// queues the file on the stage. The file is on the stage queue (or with a
// worker) exactly while its FIFO is not empty, so one worker at a time runs
// its requests, in order.
func (f *File) submit(req fileReq) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return fmt.Errorf("%w: %w", ErrFileClosed, &sink.ClosedError{Sink: f.name})
	}
	if f.q.len() >= f.core.cfg.MaxPending {
		return fmt.Errorf("aio: %s: %w", f.name, &sink.RejectError{Sink: f.core.cfg.Stage,
			Reason: fmt.Sprintf("%d requests pending on the file", f.q.len())})
	}
	if !f.running {
		if err := f.in.Enqueue(f); err != nil {
			return fmt.Errorf("aio: %s %s: %w", req.op, f.name, err)
		}
		f.running = true
	}
	f.q.push(req)
	if req.op == OpClose {
		f.closing = true
	}
	f.core.stats.requests.Add(1)
	return nil
}

// fileHandler is the asyncFile stage's handler.
type fileHandler struct{ core *fileCore }

func (h *fileHandler) Init(c *stage.Context) error {
	h.core.ctx = c.Context()
	h.core.sctx = c
	h.core.log = c.Logger()
	c.Profile("files.open", func() float64 {
		h.core.mu.Lock()
		defer h.core.mu.Unlock()
		return float64(len(h.core.open))
	})
	c.Profile("requests", func() float64 { return float64(h.core.stats.requests.Load()) })
	c.Profile("errors", func() float64 { return float64(h.core.stats.errors.Load()) })
	return nil
}

func (h *fileHandler) HandleEvents(batch []sink.Event) error {
	var bad []string
	for _, ev := range batch {
		switch v := ev.(type) {
		case *File:
			v.run()
		case *readFileReq:
			h.core.deliver(v.done, h.core.readFile(v))
		case *openSharedReq:
			h.core.deliver(v.done, openShared(v))
		default:
			bad = append(bad, fmt.Sprintf("%T", ev))
		}
	}
	if bad != nil {
		return fmt.Errorf("%w: asyncFile stage got %v", ErrBadEvent, bad)
	}
	return nil
}

// Destroy closes the files the application left open.
func (h *fileHandler) Destroy() error {
	c := h.core
	c.mu.Lock()
	open := c.open
	c.open = map[*File]struct{}{}
	c.mu.Unlock()
	var errs []error
	for f := range open {
		if f.f != nil {
			errs = append(errs, f.f.Close())
			f.f = nil
		}
	}
	if len(open) > 0 {
		c.log.Warn("aio: files left open at shutdown were closed", "count", len(open))
	}
	return errors.Join(errs...)
}

// run executes the file's requests in order until its FIFO is empty.
func (f *File) run() {
	for {
		f.mu.Lock()
		if f.q.len() == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		req := f.q.pop()
		f.mu.Unlock()
		f.core.deliver(f.done, f.exec(req))
	}
}

func (f *File) fail(op Op, err error, tag any) sink.Event {
	return IOError{File: f, Path: f.name, Op: op, Err: err, Tag: tag}
}

// exec performs one request with blocking system calls.
func (f *File) exec(r fileReq) sink.Event {
	if r.op == OpOpen {
		return f.open(r)
	}
	if f.f == nil {
		if r.op == OpClose {
			return IOCompleted{File: f, Op: OpClose, Tag: r.tag}
		}
		err := ErrNotOpen
		if f.openErr != nil {
			err = fmt.Errorf("%w: %w", ErrNotOpen, f.openErr)
		}
		return f.fail(r.op, err, r.tag)
	}
	switch r.op {
	case OpRead:
		buf := make([]byte, r.n)
		n, err := io.ReadFull(f.f, buf)
		switch {
		case err == io.EOF:
			return EOF{File: f, Offset: f.offset(), Tag: r.tag}
		case err != nil && err != io.ErrUnexpectedEOF:
			return f.fail(r.op, err, r.tag)
		}
		return IOCompleted{File: f, Op: OpRead, Data: buf[:n], N: n, Offset: f.offset(), Tag: r.tag}
	case OpWrite:
		n, err := f.f.Write(r.data)
		if err != nil {
			return f.fail(r.op, err, r.tag)
		}
		return IOCompleted{File: f, Op: OpWrite, N: n, Offset: f.offset(), Tag: r.tag}
	case OpSeek:
		off, err := f.f.Seek(r.off, r.whence)
		if err != nil {
			return f.fail(r.op, err, r.tag)
		}
		return IOCompleted{File: f, Op: OpSeek, Offset: off, Tag: r.tag}
	case OpStat:
		info, err := f.f.Stat()
		if err != nil {
			return f.fail(r.op, err, r.tag)
		}
		return IOCompleted{File: f, Op: OpStat, Info: info, Offset: f.offset(), Tag: r.tag}
	case OpFlush:
		if err := f.f.Sync(); err != nil {
			return f.fail(r.op, err, r.tag)
		}
		return IOCompleted{File: f, Op: OpFlush, Offset: f.offset(), Tag: r.tag}
	case OpClose:
		err := f.f.Close()
		f.f = nil
		f.core.untrack(f)
		if err != nil {
			return f.fail(r.op, err, r.tag)
		}
		return IOCompleted{File: f, Op: OpClose, Tag: r.tag}
	}
	return f.fail(r.op, fmt.Errorf("%w: file op %d", ErrBadEvent, r.op), r.tag)
}

func (f *File) open(r fileReq) sink.Event {
	if f.f != nil {
		return f.fail(OpOpen, fmt.Errorf("%w: already open", ErrBadEvent), r.tag)
	}
	fh, err := os.OpenFile(f.name, r.flag, r.perm)
	if errors.Is(err, syscall.EISDIR) {
		// A directory opened for writing: the kernel refuses it itself.
		err = fmt.Errorf("%w: %w", ErrIsDirectory, err)
	}
	if err != nil {
		f.openErr = err
		return f.fail(OpOpen, err, r.tag)
	}
	info, err := fh.Stat()
	if err == nil && info.IsDir() {
		err = fmt.Errorf("%w: %w", ErrIsDirectory, &fs.PathError{Op: "open", Path: f.name, Err: syscall.EISDIR})
	}
	if err != nil {
		_ = fh.Close()
		f.openErr = err
		return f.fail(OpOpen, err, r.tag)
	}
	f.f = fh
	f.core.track(f)
	return IOCompleted{File: f, Op: OpOpen, Info: info, Tag: r.tag}
}

func (f *File) offset() int64 {
	off, err := f.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return -1
	}
	return off
}

func (c *fileCore) track(f *File) {
	c.mu.Lock()
	c.open[f] = struct{}{}
	c.mu.Unlock()
}

func (c *fileCore) untrack(f *File) {
	c.mu.Lock()
	delete(c.open, f)
	c.mu.Unlock()
}

// readFile reads a whole file.
func (c *fileCore) readFile(r *readFileReq) sink.Event {
	fail := func(err error) sink.Event {
		return IOError{Path: r.name, Op: OpReadFile, Err: err, Tag: r.tag}
	}
	fh, err := os.Open(r.name)
	if err != nil {
		return fail(err)
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return fail(err)
	}
	if info.IsDir() {
		return fail(fmt.Errorf("%w: %w", ErrIsDirectory, &fs.PathError{Op: "read", Path: r.name, Err: syscall.EISDIR}))
	}
	limit := int64(c.cfg.MaxReadFile)
	if limit > 0 && info.Size() > limit {
		return fail(fmt.Errorf("%w: %d bytes, limit %d", ErrFileTooLarge, info.Size(), limit))
	}
	data, err := readAll(fh, info.Size(), limit)
	if err != nil {
		return fail(err)
	}
	return FileRead{Path: r.name, Data: data, Info: info, Tag: r.tag}
}

// readAll reads r to the end into one buffer sized by hint, failing past
// limit (> 0).
func readAll(r io.Reader, hint, limit int64) ([]byte, error) {
	buf := make([]byte, 0, max(hint, 0)+1) // +1: see EOF without growing
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if limit > 0 && int64(len(buf)) > limit {
			return nil, fmt.Errorf("%w: grew past limit %d while reading", ErrFileTooLarge, limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// deliver hands a completion to its sink. The stage wraps blocking calls,
// so a worker may wait for a sink that rejects; it gives up only when the
// sink is closed or the manager stops, and then counts and logs the loss.
func (c *fileCore) deliver(to Receiver, ev sink.Event) {
	if s, ok := to.(sink.Sink); ok && c.sctx != nil {
		to = c.sctx.Traced(s) // an edge from this stage, not from the caller's
	}
	if _, isErr := ev.(IOError); isErr {
		c.stats.errors.Add(1)
	} else {
		c.stats.completed.Add(1)
	}
	if err := to.Enqueue(ev); err == nil {
		return
	}
	if err := waitFor(c.ctx, to, ev); err != nil {
		if o, ok := ev.(FileOpened); ok {
			o.File.Release() // nobody will
		}
		c.stats.lost.Add(1)
		c.log.Warn("aio: file completion not delivered", "event", fmt.Sprintf("%T", ev), "err", err)
	}
}

// waitFor retries a rejected delivery like sink.EnqueueWait does for a
// sink: with back-off, until it is accepted, refused for good, or ctx ends.
func waitFor(ctx context.Context, to Receiver, ev sink.Event) error {
	if s, ok := to.(sink.Sink); ok {
		return sink.EnqueueWait(ctx, s, ev)
	}
	d := time.Millisecond
	for {
		err := to.Enqueue(ev)
		if err == nil || !retryable(err) {
			return err
		}
		if !clock.Sleep(ctx, d) {
			return fmt.Errorf("%w: %w", err, ctx.Err())
		}
		d = min(2*d, 100*time.Millisecond)
	}
}
