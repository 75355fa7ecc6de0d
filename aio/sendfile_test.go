package aio

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// tempFile writes data to a new file and returns it open, shared.
func tempFile(t *testing.T, data []byte) *SharedFile {
	t.Helper()
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	return NewSharedFile(f)
}

// doneLog records completions in order.
type doneLog struct {
	mu   sync.Mutex
	errs []error
	ids  []int
}

func (l *doneLog) fn(id int) func(error) {
	return func(err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ids = append(l.ids, id)
		l.errs = append(l.errs, err)
	}
}

func (l *doneLog) len() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.ids) }

// File segments interleaved with buffer writes arrive byte-exact and in
// order, each segment after its header, with a file much larger than the
// socket buffers and the write window; every done runs once, in order,
// with nil; each file is closed once its last segment is sent.
func TestWriteFileInOrderWithBuffers(t *testing.T) {
	checkLeaks(t)
	srv, _, c, client := serverConn(t, SocketConfig{WriteWindow: 64 << 10, OutputBudget: 128 << 10})
	big := pattern(1, 24<<20+17)
	small := pattern(2, 3000)
	fb, fs := tempFile(t, big), tempFile(t, small)
	var want bytes.Buffer
	var log doneLog
	tests := []struct {
		header []byte
		f      *SharedFile
		off, n int64
		after  []byte
	}{
		{[]byte("head-1\r\n"), fb.Retain(), 0, int64(len(big)), []byte("between")},
		{nil, fs.Retain(), 100, 2000, nil},
		{[]byte("head-3"), fb.Retain(), 5, 70000, []byte("tail")},
		{[]byte("head-4"), fs.Retain(), 0, 0, nil}, // an empty segment
	}
	fb.Release()
	fs.Release()
	id := 0
	for _, tc := range tests {
		data := append(tc.header, []byte{}...)
		want.Write(tc.header)
		if tc.f == fb {
			want.Write(big[tc.off : tc.off+tc.n])
		} else {
			want.Write(small[tc.off : tc.off+tc.n])
		}
		if err := c.WriteFile(data, tc.f, tc.off, tc.n, log.fn(id)); err != nil {
			t.Fatal(err)
		}
		id++
		if tc.after != nil {
			want.Write(tc.after)
			if err := c.Write(tc.after, nil, log.fn(id)); err != nil {
				t.Fatal(err)
			}
			id++
		}
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("bytes out of order or corrupted")
	}
	waitCond(t, "every done", func() bool { return log.len() == id })
	for i := range log.ids {
		if log.ids[i] != i || log.errs[i] != nil {
			t.Fatalf("completions %v, errors %v", log.ids, log.errs)
		}
	}
	waitCond(t, "files closed", func() bool { return fb.Closed() && fs.Closed() })
	if p := srv.Stats().OutputPending; p != 0 {
		t.Fatalf("OutputPending %d after everything was read", p)
	}
	if srv.eng.files.bytes.Load() == 0 {
		t.Fatal("no file bytes counted as sent from the file")
	}
}

// A peer that never reads pins the segment (a descriptor and an offset),
// not buffers: the socket's pending output stays within the window while
// tens of MB wait, and the file is closed exactly once when the peer
// disconnects, with the done told.
func TestWriteFileNonReaderPinsNoBuffers(t *testing.T) {
	checkLeaks(t)
	const window = 64 << 10
	srv, _, c, client := serverConn(t, SocketConfig{WriteWindow: window, OutputBudget: 1 << 20})
	data := pattern(3, 32<<20)
	f := tempFile(t, data)
	f.Retain() // the test's own reference, to look at it afterwards
	got := make(chan error, 1)
	if err := c.WriteFile([]byte("header"), f, 0, int64(len(data)), func(err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	// The socket fills; the segment then waits for the write poller.
	waitCond(t, "the segment waits for a writable socket", func() bool { return srv.eng.files.waits.Load() > 0 })
	c.mu.Lock()
	queuedFile, pending := c.laterBytes, srv.Stats().OutputPending
	c.mu.Unlock()
	if queuedFile < int64(len(data))/2 {
		t.Fatalf("only %d file bytes wait: the socket took most of %d", queuedFile, len(data))
	}
	if pending > window {
		t.Fatalf("OutputPending %d over the window %d while the peer does not read", pending, window)
	}
	if f.Closed() {
		t.Fatal("file closed while its segment waits")
	}
	_ = client.Close()
	select {
	case err := <-got:
		if !errors.Is(err, ErrConnClosed) {
			t.Fatalf("done got %v, want ErrConnClosed", err)
		}
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("done not called after the peer left")
	}
	waitCond(t, "the connection's reference released", func() bool { return f.refs.Load() == 1 })
	f.Release()
	if !f.Closed() {
		t.Fatal("file not closed by its last Release")
	}
}

// WriteFile on a closed connection fails and releases the file at once;
// bad arguments are refused with ErrBadEvent.
func TestWriteFileRefused(t *testing.T) {
	checkLeaks(t)
	_, _, c, _ := serverConn(t, SocketConfig{})
	f := tempFile(t, []byte("abc"))
	if err := c.WriteFile(nil, f.Retain(), -1, 2, nil); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("negative offset: %v", err)
	}
	if err := c.WriteFile(nil, nil, 0, 2, nil); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("nil file: %v", err)
	}
	_ = c.Abort()
	waitCond(t, "closing", c.Closing)
	if err := c.WriteFile([]byte("h"), f.Retain(), 0, 3, nil); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("closed connection: %v", err)
	}
	if f.refs.Load() != 1 {
		t.Fatalf("%d references left, want the test's own", f.refs.Load())
	}
	f.Release()
}

// A file that shrank below its segment closes the connection after the
// bytes it has (the peer sees a short body), and the file is released.
func TestWriteFileShrankClosesConnection(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	data := pattern(4, 10000)
	f := tempFile(t, data)
	f.Retain()
	errc := make(chan error, 1)
	if err := c.WriteFile([]byte("h:"), f, 0, 20000, func(err error) { errc <- err }); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(client) // until the server closes
	if want := append([]byte("h:"), data...); !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want the %d there are", len(got), len(want))
	}
	if err := <-errc; err == nil {
		t.Fatal("done got nil for a segment that could not be sent")
	}
	waitCond(t, "released", func() bool { return f.refs.Load() == 1 })
	f.Release()
}

// OpenShared delivers the open file with one reference and its fstat
// metadata, or the open's error.
func TestOpenShared(t *testing.T) {
	checkLeaks(t)
	_, fio := startFiles(t, FileConfig{})
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	mustOK(t, os.WriteFile(p, []byte("hello, world"), 0o644))
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{"file", p, nil},
		{"missing", filepath.Join(dir, "nope"), os.ErrNotExist},
		{"directory", dir, ErrIsDirectory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder("opened")
			mustOK(t, fio.OpenShared(tc.path, rec, tc.name))
			evs := rec.wait(t, "completion", func(evs []sink.Event) bool { return len(evs) == 1 })
			switch ev := evs[0].(type) {
			case FileOpened:
				if tc.wantErr != nil {
					t.Fatalf("opened, want %v", tc.wantErr)
				}
				buf := make([]byte, 5)
				if _, err := ev.File.ReadAt(buf, 7); err != nil || string(buf) != "world" || ev.Info.Size() != 12 || ev.Tag != tc.name {
					t.Fatalf("read %q (%v), size %d, tag %v", buf, err, ev.Info.Size(), ev.Tag)
				}
				if ev.File.Refs() != 1 {
					t.Fatalf("%d references, want 1", ev.File.Refs())
				}
				ev.File.Release()
				if !ev.File.Closed() {
					t.Fatal("not closed by its only Release")
				}
			case IOError:
				if !errors.Is(ev, tc.wantErr) || ev.Op != OpOpen {
					t.Fatalf("error %v (op %v), want %v", ev.Err, ev.Op, tc.wantErr)
				}
			default:
				t.Fatalf("got %T", ev)
			}
		})
	}
}

// A segment larger than the write window goes out window after window
// on the event loop, without waiting for the maintenance goroutine's
// drain polls (made rare here): only a full socket makes it wait, and
// the write poller ends that wait.
func TestWriteFileNeedsNoDrainPolls(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{WriteWindow: 16 << 10, PollInterval: time.Hour})
	data := pattern(5, 8<<20)
	if err := c.WriteFile(nil, tempFile(t, data), 0, int64(len(data)), nil); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(time.Minute)) // hang guard
	got := make([]byte, len(data))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatalf("%v: the segment stalled between windows", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("bytes corrupted")
	}
}

// A peer that stops reading a file segment is closed by WriteTimeout
// although nothing polls the drain (the segment waits on the write
// poller): the done hears ErrWriteTimeout's close, the file is released.
func TestWriteFileWriteTimeout(t *testing.T) {
	checkLeaks(t)
	srv, owner, c, _ := serverConn(t, SocketConfig{WriteTimeout: 200 * time.Millisecond})
	data := pattern(6, 32<<20)
	f := tempFile(t, data)
	f.Retain()
	errc := make(chan error, 1)
	if err := c.WriteFile(nil, f, 0, int64(len(data)), func(err error) { errc <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrConnClosed) {
			t.Fatalf("done got %v", err)
		}
	case <-time.After(time.Minute): // hang guard
		t.Fatal("a non-reader of a file segment was never timed out")
	}
	evs := owner.wait(t, "SinkClosed", func(evs []sink.Event) bool { return count[SinkClosed](evs) == 1 })
	if ev, _ := first[SinkClosed](evs); ev.Reason != ClosedWriteTimeout {
		t.Fatalf("closed for %v, want the write timeout", ev.Reason)
	}
	if srv.Stats().WriteTimeouts != 1 {
		t.Fatalf("write timeouts counted: %d", srv.Stats().WriteTimeouts)
	}
	waitCond(t, "released", func() bool { return f.Refs() == 1 })
	f.Release()
}
