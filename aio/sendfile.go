package aio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// This file is the outbox's file segments: a write that is a region of an
// open file rather than buffers, sent by the event loop with sendfile(2)
// where the platform has it (sendfile_linux.go) and by pread and write
// elsewhere. A file segment counts its bytes in the queue like any write
// (WriteThreshold, completions), but it holds no buffer while it waits:
// a peer that does not read pins a descriptor and an offset.

// ErrFileOnTLS is WriteFile's error on a TLS connection: its bytes must be
// encrypted in user space, so the caller reads the file into buffers.
var ErrFileOnTLS = errors.New("aio: file segments cannot be sent on a TLS connection")

// ErrFileShrank closes a connection whose file segment ran past the end
// of its file: the peer was promised bytes that are not there.
var ErrFileShrank = errors.New("aio: file shorter than the segment being sent")

// fileSending is a socket's (engine's) state for file segments.
type fileSending struct {
	mu      sync.Mutex
	stopped bool
	poller  atomic.Pointer[writePoller] // started on first use
	waits   atomic.Uint64               // times a segment waited for its socket to be writable
	bytes   atomic.Uint64               // file bytes sent
}

// SharedFile is an open file shared by the writes that send it (and by a
// cache of open files): reference counted, its descriptor is closed by
// the last Release, exactly once. Read it with ReadAt (pread), which is
// safe for concurrent use and does not move a file offset.
type SharedFile struct {
	f    *os.File
	fd   int // f.Fd(), taken once (sendfile's input)
	refs atomic.Int32
}

// NewSharedFile wraps f, holding one reference.
func NewSharedFile(f *os.File) *SharedFile {
	s := &SharedFile{f: f, fd: int(f.Fd())}
	s.refs.Store(1)
	return s
}

// Retain adds a reference (one more Release is due) and returns s.
func (s *SharedFile) Retain() *SharedFile {
	if s.refs.Add(1) <= 1 {
		panic("aio: SharedFile retained after its last Release")
	}
	return s
}

// Release drops a reference; the last one closes the file. Releasing more
// often than NewSharedFile and Retain allow is a bug and panics.
func (s *SharedFile) Release() {
	switch n := s.refs.Add(-1); {
	case n == 0:
		_ = s.f.Close()
	case n < 0:
		panic("aio: SharedFile released too often")
	}
}

// Refs is the number of references held.
func (s *SharedFile) Refs() int { return int(max(s.refs.Load(), 0)) }

// Closed reports whether the last reference was released.
func (s *SharedFile) Closed() bool { return s.refs.Load() <= 0 }

// File is the open file (do not close it; do not use its offset).
func (s *SharedFile) File() *os.File { return s.f }

// Name is the file's name as opened.
func (s *SharedFile) Name() string { return s.f.Name() }

// ReadAt reads len(p) bytes at off (pread).
func (s *SharedFile) ReadAt(p []byte, off int64) (int, error) { return s.f.ReadAt(p, off) }

// WriteFile queues header followed by n bytes of f from offset off, in
// order after every earlier write, like Write (never refused for the
// write threshold). It takes over one reference to f, released exactly
// once: when the bytes are written to the kernel, when the connection
// closes first, or at once if WriteFile returns an error. done, if not
// nil, is called as for Write.
//
// The event loop sends the segment straight from the file (sendfile on
// Linux) once every byte before it is in the kernel, as far as the
// WriteWindow and OutputBudget let it, and resumes when the socket is
// writable again; the file's bytes are never in user space. A TLS
// connection refuses segments (ErrFileOnTLS).
func (c *Connection) WriteFile(header []byte, f *SharedFile, off, n int64, done func(error)) error {
	switch {
	case f == nil || off < 0 || n < 0:
		f.releaseIfAny()
		return fmt.Errorf("%w: WriteFile(%v, %d, %d)", ErrBadEvent, f, off, n)
	case c.tls != nil:
		f.Release()
		return ErrFileOnTLS
	}
	var ops [2]writeOp
	k := 0
	if len(header) > 0 {
		ops[k] = writeOp{data: header, n: len(header)}
		k++
	}
	if n > 0 {
		ops[k] = writeOp{file: f, off: off, n: int(n), fn: done}
		k++
	} else {
		f.Release()
		if k == 0 {
			return c.Write(nil, nil, done)
		}
		ops[0].fn = done
	}
	if err := c.submit(ops[:k], false, 0, 0, false); err != nil {
		if n > 0 {
			f.Release()
		}
		return err
	}
	return nil
}

func (s *SharedFile) releaseIfAny() {
	if s != nil {
		s.Release()
	}
}

// firstFileOp returns the index of the first file segment of ops (-1:
// none).
func firstFileOp(ops []writeOp) int {
	for i := range ops {
		if ops[i].file != nil {
			return i
		}
	}
	return -1
}

// releaseFilesLocked releases the files of the segments still queued
// (the connection closed with them unsent).
func (c *Connection) releaseFilesLocked() {
	for c.later.len() > 0 {
		if op := c.later.pop(); op.file != nil {
			op.file.Release()
		}
	}
}

// fileSendCap is the most file bytes one event-loop visit sends to a
// connection before it lets the loop serve the others (and comes back).
const fileSendCap = 1 << 20

// sendFileLocked sends (part of) the file segment at the front of later,
// c.mu held (released around the system calls), as much as the window
// grants. It reports whether the caller may go on (the grant was sent
// and the socket takes more: the rest of the segment, or what follows
// it); sent adds the file bytes sent. It stops when gnet's own buffer cannot
// be flushed before it (header bytes must go first), when the socket is
// full (then the engine's write poller wakes the connection when it is
// writable), when the budget has no room (the drain poll comes back), or
// when the connection failed.
func (c *Connection) sendFileLocked(gc gnet.Conn, sent *int64) bool {
	if !c.flushOutboundLocked(gc) { // tlswindow.go
		return false
	}
	op := c.later.front()
	room := c.grantLocked(int64(op.n))
	if room <= 0 {
		return false
	}
	f, off := op.file, op.off
	c.mu.Unlock()
	m, err := sendFileSegment(gc, f, off, room)
	c.mu.Lock()
	if c.state == stateClosed {
		c.eng.stats.outPending.Add(-room) // OnClose returned only what was handed
		return false
	}
	op = c.later.front()
	op.off += m
	op.n -= int(m)
	c.laterBytes -= m
	c.handed += m
	c.applied += m
	*sent += m
	c.eng.files.bytes.Add(uint64(m))
	c.eng.stats.outPending.Add(m - room) // the grant not used
	c.updateFlushedLocked(gc)
	if op.n == 0 {
		c.later.pop()
		f.Release()
	}
	switch {
	case errors.Is(err, errSocketFull):
		c.waitWritableLocked(gc)
		return false
	case err != nil:
		c.abortLocked(ClosedError, err)
		return false
	case m == 0:
		// Nothing sent and no error: the file ends before the segment.
		c.abortLocked(ClosedError, fmt.Errorf("%w: %s at %d", ErrFileShrank, f.Name(), off))
		return false
	}
	return true
}

// copyFileSegment is the portable way to send a file segment: read (at
// most 64 KiB of) it, n > 0, and hand the bytes to gnet, which writes what the
// socket takes and buffers the rest. It never reports errSocketFull: a
// full socket is gnet's to wait for.
func copyFileSegment(gc gnet.Conn, f *SharedFile, off, n int64) (int64, error) {
	buf := make([]byte, min(n, 64<<10))
	m, err := f.ReadAt(buf, off)
	if m == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			return 0, nil // the file shrank: the caller closes
		}
		return 0, err
	}
	if _, err := gc.Write(buf[:m]); err != nil {
		return 0, err
	}
	return int64(m), nil
}

// SendsFiles reports whether WriteFile can send file segments on c: false
// on a TLS connection.
func (c *Connection) SendsFiles() bool { return c.tls == nil }
