package http

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandstorm-go/sandstorm/aio"
)

// A file body holds at most two chunks: once it has handed out two whose
// writes have not completed, it reads nothing more until the older one's
// completion comes; it hands out the region's bytes in order, releases
// the file after the last read, and completes the reply after the last
// chunk's write.
func TestFileBodyHoldsTwoChunks(t *testing.T) {
	data := make([]byte, 5*h2FileChunk+123)
	for i := range data {
		data[i] = byte(i * 13)
	}
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	sf := aio.NewSharedFile(f)
	const off = 100
	replied := 0
	b := newFileBody(&FileBody{File: sf.Retain(), Offset: off, Length: int64(len(data) - off)}, func(err error) {
		if err != nil {
			t.Errorf("reply completed with %v", err)
		}
		replied++
	})
	var got []byte
	var pending []func(error) // completions of the chunks handed out, oldest first
	for !b.done() {
		if b.ready() == 0 {
			if !b.waiting() {
				t.Fatal("nothing ready and not waiting for a write")
			}
			if len(pending) != 2 {
				t.Fatalf("waiting with %d chunks in flight, want 2", len(pending))
			}
			pending[0](nil)
			pending = pending[1:]
			continue
		}
		var bufs [][]byte
		bufs, pending, _ = b.take(nil, pending, h2FrameSize)
		got = append(got, bytes.Join(bufs, nil)...)
		if len(pending) > 2 && !b.done() {
			t.Fatalf("%d chunks in flight", len(pending))
		}
	}
	if !bytes.Equal(got, data[off:]) {
		t.Fatalf("%d bytes, not the region's %d", len(got), len(data)-off)
	}
	if sf.Refs() != 1 {
		t.Fatalf("%d references after the last read, want the test's only", sf.Refs())
	}
	for _, d := range pending {
		d(nil)
	}
	if replied != 1 {
		t.Fatalf("reply completed %d times", replied)
	}
	sf.Release()
}

// A failed file body releases its file once and completes the reply with
// the error, whether it failed before or after reading.
func TestFileBodyFailReleases(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, make([]byte, 3*h2FileChunk), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, reads := range []int{0, 1} {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sf := aio.NewSharedFile(f)
		var got error
		b := newFileBody(&FileBody{File: sf.Retain(), Length: 3 * h2FileChunk}, func(err error) { got = err })
		for range reads {
			b.ready()
		}
		boom := errors.New("boom")
		for _, c := range b.fail(nil, boom) {
			c.f(c.err)
		}
		b.fail(nil, boom) // a second fail does nothing
		if sf.Refs() != 1 || !errors.Is(got, boom) {
			t.Fatalf("after %d reads: %d references, reply error %v", reads, sf.Refs(), got)
		}
		sf.Release()
	}
}
