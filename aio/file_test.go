package aio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

func startFiles(t *testing.T, cfg FileConfig) (*stage.Manager, *FileIO) {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	fio, err := NewFileIO(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(ctxTimeout(t)); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return m, fio
}

// serialCheck is a completion sink that records events per file and
// reports two completions of one file delivered at once. Each delivery
// marks its file busy for a while (hold: by default a few yields of the
// processor, and the recording), so that an overlapping one finds the mark.
type serialCheck struct {
	report func(format string, args ...any)
	hold   func(sink.Event)
	mu     sync.Mutex
	busy   map[*File]bool
	events map[*File][]sink.Event
	all    *recorder
}

func newSerialCheck(t *testing.T) *serialCheck {
	return &serialCheck{report: t.Errorf, busy: map[*File]bool{}, events: map[*File][]sink.Event{}, all: newRecorder("completions")}
}

func fileOf(e sink.Event) *File {
	switch v := e.(type) {
	case IOCompleted:
		return v.File
	case EOF:
		return v.File
	case IOError:
		return v.File
	}
	return nil
}

func (s *serialCheck) sink() sink.Sink {
	return fnSink(func(e sink.Event) error {
		f := fileOf(e)
		s.mu.Lock()
		if s.busy[f] {
			s.report("two completions of %s delivered concurrently", f.Name())
		}
		s.busy[f] = true
		s.events[f] = append(s.events[f], e)
		s.mu.Unlock()
		if s.hold != nil {
			s.hold(e)
		} else {
			for range 3 {
				runtime.Gosched()
			}
		}
		err := s.all.Enqueue(e)
		s.mu.Lock()
		s.busy[f] = false
		s.mu.Unlock()
		return err
	})
}

// TestSerialCheckDetectsOverlap checks the checker: a completion delivered
// while another of the same file is still being delivered is reported.
func TestSerialCheckDetectsOverlap(t *testing.T) {
	s := newSerialCheck(t)
	var reports []string
	s.report = func(format string, args ...any) { reports = append(reports, fmt.Sprintf(format, args...)) }
	entered, release := make(chan struct{}), make(chan struct{})
	s.hold = func(e sink.Event) {
		if _, ok := e.(IOCompleted); ok {
			close(entered)
			<-release
		}
	}
	f := &File{name: "f"}
	done := make(chan error, 1)
	go func() { done <- s.sink().Enqueue(IOCompleted{File: f}) }()
	<-entered
	mustOK(t, s.sink().Enqueue(EOF{File: f})) // while the first is in flight
	close(release)
	mustOK(t, <-done)
	mustOK(t, s.sink().Enqueue(EOF{File: f})) // after: fine
	if len(reports) != 1 {
		t.Fatalf("reports %q, want exactly the overlapping delivery", reports)
	}
}

func TestFileOpsOrderedPerFileManyFilesInParallel(t *testing.T) {
	checkLeaks(t)
	_, fio := startFiles(t, FileConfig{ThreadPool: stage.ThreadPoolConfig{Min: 4, Max: 8}})
	dir := t.TempDir()
	check := newSerialCheck(t)
	const files, chunks, chunk = 40, 6, 3000
	handles := make([]*File, files)
	for i := range files {
		f, err := fio.Open(filepath.Join(dir, fmt.Sprintf("f%02d", i)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644, check.sink(), "open")
		if err != nil {
			t.Fatal(err)
		}
		handles[i] = f
		// Queue the whole life of the file at once: the per-file order is
		// what makes it correct.
		for k := range chunks {
			if err := f.Write(pattern(i*100+k, chunk), k); err != nil {
				t.Fatal(err)
			}
		}
		mustOK(t, f.Flush("flush"))
		mustOK(t, f.SeekTo(chunk, io.SeekStart, "seek"))
		mustOK(t, f.Read(chunk, "read1"))
		mustOK(t, f.SeekTo(-chunk, io.SeekEnd, "seekEnd"))
		mustOK(t, f.Read(2*chunk, "readLast"))
		mustOK(t, f.Read(10, "readEOF"))
		mustOK(t, f.Stat("stat"))
		mustOK(t, f.Close("close"))
	}
	perFile := 1 + chunks + 8
	check.all.wait(t, "all completions", func(evs []sink.Event) bool { return len(evs) == files*perFile })
	for i, f := range handles {
		evs := check.events[f]
		tags := make([]any, len(evs))
		for j, e := range evs {
			switch v := e.(type) {
			case IOCompleted:
				tags[j] = v.Tag
			case EOF:
				tags[j] = v.Tag
			case IOError:
				t.Fatalf("file %d: %v", i, v)
			}
		}
		want := []any{"open", 0, 1, 2, 3, 4, 5, "flush", "seek", "read1", "seekEnd", "readLast", "readEOF", "stat", "close"}
		if fmt.Sprint(tags) != fmt.Sprint(want) {
			t.Fatalf("file %d completions %v, want %v", i, tags, want)
		}
		if r := evs[9].(IOCompleted); !bytes.Equal(r.Data, pattern(i*100+1, chunk)) || r.Offset != 2*chunk {
			t.Fatalf("file %d: read after seek got the wrong bytes (offset %d)", i, r.Offset)
		}
		if s := evs[10].(IOCompleted); s.Offset != (chunks-1)*chunk {
			t.Fatalf("file %d: SeekEnd offset %d", i, s.Offset)
		}
		if r := evs[11].(IOCompleted); r.N != chunk || !bytes.Equal(r.Data, pattern(i*100+chunks-1, chunk)) {
			t.Fatalf("file %d: short read at the end got %d bytes", i, r.N)
		}
		if _, ok := evs[12].(EOF); !ok {
			t.Fatalf("file %d: read at end gave %T, want EOF", i, evs[12])
		}
		if st := evs[13].(IOCompleted); st.Info.Size() != chunks*chunk {
			t.Fatalf("file %d: stat size %d", i, st.Info.Size())
		}
		// And the bytes really are on disk, in order.
		got, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		var want2 bytes.Buffer
		for k := range chunks {
			want2.Write(pattern(i*100+k, chunk))
		}
		if !bytes.Equal(got, want2.Bytes()) {
			t.Fatalf("file %d: content on disk differs", i)
		}
	}
	if s := fio.Stats(); s.Open != 0 || s.Errors != 0 || s.Completed != uint64(files*perFile) {
		t.Fatalf("stats %+v", s)
	}
	if err := handles[0].Read(1, nil); !errors.Is(err, ErrFileClosed) || !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("request after Close: %v", err)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFileErrors(t *testing.T) {
	checkLeaks(t)
	_, fio := startFiles(t, FileConfig{})
	dir := t.TempDir()
	rec := newRecorder("completions")
	missing := filepath.Join(dir, "nope.txt")

	f, err := fio.Open(missing, os.O_RDONLY, 0, rec, "open-missing")
	mustOK(t, err)
	mustOK(t, f.Read(10, "read-after-failed-open"))
	mustOK(t, f.Close("close-after-failed-open"))
	evs := rec.wait(t, "3 completions", func(evs []sink.Event) bool { return len(evs) == 3 })
	oe, ok := evs[0].(IOError)
	if !ok || oe.Op != OpOpen || !errors.Is(oe.Err, fs.ErrNotExist) || oe.Path != missing {
		t.Fatalf("open of a missing file: %#v", evs[0])
	}
	if re, ok := evs[1].(IOError); !ok || !errors.Is(re.Err, ErrNotOpen) || !errors.Is(re.Err, fs.ErrNotExist) {
		t.Fatalf("read after failed open: %#v", evs[1])
	}
	if c, ok := evs[2].(IOCompleted); !ok || c.Op != OpClose {
		t.Fatalf("close after failed open: %#v", evs[2])
	}

	rec2 := newRecorder("dir")
	d, err := fio.Open(dir, os.O_RDONLY, 0, rec2, "open-dir")
	mustOK(t, err)
	evs = rec2.wait(t, "dir error", func(evs []sink.Event) bool { return len(evs) == 1 })
	de, ok := evs[0].(IOError)
	if !ok || !errors.Is(de.Err, ErrIsDirectory) || de.File != d {
		t.Fatalf("open of a directory: %#v", evs[0])
	}
	var pe *fs.PathError
	if !errors.As(de.Err, &pe) || pe.Path != dir {
		t.Fatalf("directory error %v does not carry the fs.PathError", de.Err)
	}
	// Opened for writing, the kernel refuses the directory (EISDIR) before
	// any Stat: the same error.
	for i, flag := range []int{os.O_RDWR, os.O_WRONLY, os.O_WRONLY | os.O_CREATE} {
		recW := newRecorder("dir-write")
		dw, err := fio.Open(dir, flag, 0o644, recW, i)
		mustOK(t, err)
		evs = recW.wait(t, "dir error", func(evs []sink.Event) bool { return len(evs) == 1 })
		de, ok := evs[0].(IOError)
		if !ok || de.Op != OpOpen || !errors.Is(de.Err, ErrIsDirectory) || de.File != dw {
			t.Fatalf("open of a directory with flag %#x: %#v", flag, evs[0])
		}
		if !errors.As(de.Err, &pe) || pe.Path != dir {
			t.Fatalf("directory error %v does not carry the fs.PathError", de.Err)
		}
	}

	rec3 := newRecorder("readfile")
	mustOK(t, fio.ReadFile(missing, rec3, 1))
	mustOK(t, fio.ReadFile(dir, rec3, 2))
	evs = rec3.wait(t, "readfile errors", func(evs []sink.Event) bool { return len(evs) == 2 })
	if e := evs[0].(IOError); e.Op != OpReadFile || !errors.Is(e.Err, fs.ErrNotExist) {
		t.Fatalf("ReadFile missing: %v", e)
	}
	if e := evs[1].(IOError); !errors.Is(e.Err, ErrIsDirectory) {
		t.Fatalf("ReadFile dir: %v", e)
	}
	// Bad requests are refused up front.
	if _, err := fio.Open("x", os.O_RDONLY, 0, nil, nil); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("nil sink: %v", err)
	}
	if err := f.Read(0, nil); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("Read(0): %v", err)
	}
}

func TestReadFile(t *testing.T) {
	checkLeaks(t)
	_, fio := startFiles(t, FileConfig{MaxReadFile: 1 << 20})
	dir := t.TempDir()
	rec := newRecorder("readfile")
	sizes := []int{0, 1, 4096, 100000, 1 << 20}
	for i, n := range sizes {
		p := filepath.Join(dir, fmt.Sprint(i))
		mustOK(t, os.WriteFile(p, pattern(i, n), 0o644))
		mustOK(t, fio.ReadFile(p, rec, i))
	}
	big := filepath.Join(dir, "big")
	mustOK(t, os.WriteFile(big, make([]byte, 1<<20+1), 0o644))
	mustOK(t, fio.ReadFile(big, rec, "big"))
	evs := rec.wait(t, "reads", func(evs []sink.Event) bool { return len(evs) == len(sizes)+1 })
	for _, e := range evs {
		switch v := e.(type) {
		case FileRead:
			i := v.Tag.(int)
			if !bytes.Equal(v.Data, pattern(i, sizes[i])) || v.Info.Size() != int64(sizes[i]) {
				t.Fatalf("ReadFile %d: %d bytes", i, len(v.Data))
			}
		case IOError:
			if v.Tag != "big" || !errors.Is(v.Err, ErrFileTooLarge) {
				t.Fatalf("unexpected error %v", v)
			}
		}
	}
	if count[IOError](evs) != 1 {
		t.Fatalf("want exactly the oversized file refused: %s", summarize(evs))
	}
}

func TestFilesGetOrCreateAndController(t *testing.T) {
	m, err := stage.Parse([]byte("global:\n  aio:\n    file: {stage: disk, maxPending: 3}\n"), stage.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	fio, err := Files(m)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Files(m)
	if err != nil || again.core != fio.core {
		t.Fatalf("second Files: %v (same stage: %v)", err, again != nil && again.core == fio.core)
	}
	st, ok := m.Stage("disk")
	if !ok || st != fio.Stage() {
		t.Fatal("stage not named from the configuration")
	}
	pc := st.Config().ThreadPool
	if pc.Min != 1 || pc.Max != 20 || !pc.Controller.Enabled {
		t.Fatalf("file stage pool %+v: want 1..20 with the controller on", pc)
	}
	if _, err := NewFileIO(m, FileConfig{Stage: "disk"}); !errors.Is(err, stage.ErrStageExists) {
		t.Fatalf("second NewFileIO: %v", err)
	}
	// Before Start, requests queue; MaxPending bounds one file's FIFO.
	rec := newRecorder("c")
	dir := t.TempDir()
	f, err := fio.Open(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE, 0o644, rec, nil)
	mustOK(t, err)
	mustOK(t, f.Write([]byte("x"), nil))
	mustOK(t, f.Write([]byte("y"), nil))
	if err := f.Write([]byte("z"), nil); !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("4th pending request: %v, want ErrRejected", err)
	}
	if _, err := m.CreateStage("other", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	m2, _ := stage.Parse([]byte("global:\n  aio:\n    file: {stage: other}\n"), stage.NewRegistry())
	if _, err := m2.CreateStage("other", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Files(m2); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Files over a foreign stage: %v", err)
	}
	if err := m.Start(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "queued requests ran", func(evs []sink.Event) bool { return len(evs) == 3 })
	// Left open: Destroy closes it at shutdown.
	if err := m.Shutdown(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	if fio.Stats().Open != 0 {
		t.Fatal("file left open after shutdown")
	}
	_ = m2.Shutdown(ctxTimeout(t))
}

func TestFileCompletionWaitsForRejectingSink(t *testing.T) {
	checkLeaks(t)
	_, fio := startFiles(t, FileConfig{})
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	mustOK(t, os.WriteFile(p, []byte("hello"), 0o644))
	rec := newRecorder("slow")
	var mu sync.Mutex
	refusals := 0
	rec.setReject(func(sink.Event) bool {
		mu.Lock()
		defer mu.Unlock()
		refusals++
		return refusals <= 3
	})
	mustOK(t, fio.ReadFile(p, rec, nil))
	evs := rec.wait(t, "completion", func(evs []sink.Event) bool { return len(evs) == 1 })
	if fr, ok := evs[0].(FileRead); !ok || string(fr.Data) != "hello" {
		t.Fatalf("got %#v", evs[0])
	}
	if fio.Stats().Lost != 0 {
		t.Fatal("completion counted as lost")
	}
}

func TestFilesProceedInParallel(t *testing.T) {
	checkLeaks(t)
	_, fio := startFiles(t, FileConfig{ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 2}})
	dir := t.TempDir()
	bDone, giveUp := make(chan struct{}), make(chan struct{})
	// Runs before startFiles' Shutdown (cleanups run last first): a failed
	// test frees a's worker.
	t.Cleanup(func() { close(giveUp) })
	// File a's completion blocks its worker until file b has completed:
	// with files served one at a time b would never complete.
	aSink := fnSink(func(sink.Event) error {
		select {
		case <-bDone:
		case <-giveUp:
		}
		return nil
	})
	bSink := fnSink(func(sink.Event) error { close(bDone); return nil })
	a, err := fio.Open(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE, 0o644, aSink, nil)
	mustOK(t, err)
	waitCond(t, "a's worker to block", func() bool { return fio.Stats().Completed == 1 })
	if _, err := fio.Open(filepath.Join(dir, "b"), os.O_RDWR|os.O_CREATE, 0o644, bSink, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	select {
	case <-bDone:
	case <-deadline.C:
		t.Fatal("file b did not complete while file a's worker was blocked: files are not served in parallel")
	}
	// a's worker is free again and a's next request runs.
	mustOK(t, a.Close(nil))
	waitCond(t, "a closed", func() bool { return fio.Stats().Completed == 3 && fio.Stats().Open == 1 })
}
