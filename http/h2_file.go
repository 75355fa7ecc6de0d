package http

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/aio"
)

// This file is an HTTP/2 stream's file body (Response.File): the file
// region read with pread in chunks as the stream's turns take it, so that
// a stream holds at most two chunks whatever the file's size: the one
// being framed, and the one before it while the outbox still writes its
// bytes. A chunk is read when the stream's turn needs it, by the
// goroutine flushing the connection (the event loop after a write
// completes or a WINDOW_UPDATE, or the answering goroutine for the
// first chunk), under the connection's lock. That is where HTTP/1.1 sends
// a file too: sendfile(2) runs on the event loop and waits for the disk
// the same way when the file is not in the page cache, so a pread of at
// most h2FileChunk bytes costs no more. Files worth serving this way
// (Haboob's open-file cache) are read again and again and stay cached.

// h2FileChunk is the size of a file body's reads: four DATA frames, the
// default stream window of RFC 9113 rounded up.
const h2FileChunk = 64 << 10

// fileChunks recycles the chunks of finished file bodies.
var fileChunks = sync.Pool{New: func() any { b := make([]byte, h2FileChunk); return &b }}

// fileChunk is one of a file body's two buffers. busy is set while the
// outbox holds references to its bytes; the write's completion clears it
// (from any goroutine, without the connection's lock).
type fileChunk struct {
	buf  *[]byte
	busy atomic.Bool
}

// fileBody is an h2Body reading Response.File. It owns the file's
// reference and releases it exactly once: after the last chunk is read,
// or when the stream is dropped (fail) before that.
type fileBody struct {
	file      *aio.SharedFile // nil once released
	next      int64           // file offset of the next read
	left      int64           // bytes of the body not taken yet
	chunks    [2]fileChunk
	cur       int    // chunks[cur] is being taken
	data      []byte // chunks[cur]'s bytes not taken yet
	replyDone func(error)
	err       error // a read failed (the file shrank or cannot be read)
}

func newFileBody(f *FileBody, done func(error)) *fileBody {
	return &fileBody{file: f.File, next: f.Offset, left: f.Length, replyDone: done}
}

// ready reads the next chunk once the current one is all taken and the
// other buffer's bytes are written (waiting reports that it is not).
func (b *fileBody) ready() int {
	if len(b.data) > 0 || b.left <= 0 || b.err != nil || b.waiting() {
		return len(b.data)
	}
	other := 1 - b.cur
	ch := &b.chunks[other]
	if ch.buf == nil {
		ch.buf = fileChunks.Get().(*[]byte)
	}
	p := (*ch.buf)[:min(b.left, h2FileChunk)]
	n, err := b.file.ReadAt(p, b.next)
	if n < len(p) {
		if err == nil {
			err = fmt.Errorf("short read")
		}
		b.err = fmt.Errorf("http: h2 file body %s at %d: %w", b.file.Name(), b.next+int64(n), err)
		b.release()
		return 0
	}
	b.next += int64(n)
	b.cur, b.data = other, p
	if b.left == int64(n) {
		b.release() // every byte is in memory
	}
	return len(b.data)
}

// waiting reports that the current chunk is all taken and the other
// chunk's bytes are still in the outbox: the next read waits for them.
func (b *fileBody) waiting() bool {
	return len(b.data) == 0 && b.left > 0 && b.err == nil && b.chunks[1-b.cur].busy.Load()
}

func (b *fileBody) take(bufs [][]byte, dones []func(error), n int) ([][]byte, []func(error), int) {
	k := min(n, len(b.data))
	bufs = append(bufs, b.data[:k:k])
	b.data = b.data[k:]
	b.left -= int64(k)
	if len(b.data) == 0 {
		ch := &b.chunks[b.cur]
		ch.busy.Store(true)
		if b.left > 0 {
			dones = append(dones, func(error) { ch.busy.Store(false) })
		} else {
			// The last chunk: once it is written, the other one (written
			// before it) is free too, and the body is forgotten.
			free := [2]*[]byte{b.chunks[0].buf, b.chunks[1].buf}
			dones = append(dones, func(error) {
				for _, p := range free {
					if p != nil {
						fileChunks.Put(p)
					}
				}
			})
			dones = appendDone(dones, b.replyDone)
			b.replyDone = nil
		}
	}
	return bufs, dones, k
}

func (b *fileBody) done() bool    { return b.left <= 0 }
func (b *fileBody) pending() bool { return b.left > 0 && b.err == nil }

// fail releases the file if it is still held and gives the reply's
// completion err. Its chunks may still be in the outbox: they are left to
// the collector.
func (b *fileBody) fail(calls []doneCall, err error) []doneCall {
	b.release()
	b.data = nil
	if b.err == nil {
		b.err = err // nothing more is read
	}
	if b.replyDone != nil {
		calls = append(calls, doneCall{b.replyDone, err})
		b.replyDone = nil
	}
	return calls
}

func (b *fileBody) release() {
	if b.file != nil {
		b.file.Release()
		b.file = nil
	}
}
