package aio

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// This file recycles the buffers TLS records are sealed into. Every
// encrypted write used to get a new buffer as large as its ciphertext:
// for a server sending megabytes a second that was most of its allocated
// bytes, and the garbage collections they caused a large part of its CPU.
// A buffer is now taken from a pool by size class and given back once
// the event loop has handed all its bytes to the kernel (or to gnet's own
// outbound buffer, which copies what the kernel does not take): the
// connection's applied offset has passed its last byte. A buffer whose
// connection closes first is left to the garbage collector.

const (
	minCipherClass = 12 // 4 KiB: the smallest pooled buffer
	maxCipherClass = 20 // 1 MiB: larger ones are allocated and dropped
)

// cipherPools holds spare buffers, one pool per power-of-two capacity.
var cipherPools [maxCipherClass + 1]sync.Pool

// cipherBufStats counts buffers taken from the pools and given back,
// and of those the handshake flights' (tests read them).
var cipherBufStats struct{ got, reused, recycled, flights atomic.Uint64 }

// getCipherBuf returns an empty buffer with room for at least n bytes,
// pooled when n is within the pooled sizes.
func getCipherBuf(n int) []byte {
	c := cipherClassFor(n)
	if c > maxCipherClass {
		return make([]byte, 0, n)
	}
	cipherBufStats.got.Add(1)
	if p, ok := cipherPools[c].Get().(*[]byte); ok {
		cipherBufStats.reused.Add(1)
		b := (*p)[:0]
		*p = nil
		sliceHeaders.Put(p)
		return b
	}
	return make([]byte, 0, 1<<c)
}

// sliceHeaders holds the *[]byte a pooled buffer travels in, emptied once
// getCipherBuf took the buffer out, for putCipherBuf to put the next one
// in: giving a buffer back allocates nothing (a new header each time was
// one object per sealed response).
var sliceHeaders = sync.Pool{New: func() any { return new([]byte) }}

// putCipherBuf gives b's array back to the pool of the largest class it
// can serve. Its bytes must be referenced nowhere else.
func putCipherBuf(b []byte) {
	n := cap(b)
	if n < 1<<minCipherClass {
		return
	}
	c := bits.Len(uint(n)) - 1 // 1<<c <= n
	if c > maxCipherClass {
		return
	}
	p := sliceHeaders.Get().(*[]byte)
	*p = b[:0]
	cipherBufStats.recycled.Add(1)
	cipherPools[c].Put(p)
}

// cipherClassFor is the smallest class whose buffers hold n bytes.
func cipherClassFor(n int) int {
	if n <= 1<<minCipherClass {
		return minCipherClass
	}
	return bits.Len(uint(n - 1))
}

// sealedBuf is a buffer of ciphertext on its way out: end is the
// connection's output offset just past its last byte.
type sealedBuf struct {
	end int64
	buf []byte
}

// sealedBufs are a connection's buffers of ciphertext on their way out,
// in output order (c.mu held).
type sealedBufs struct{ q deque[sealedBuf] }

// add records that buf's bytes end at output offset end.
func (s *sealedBufs) add(buf []byte, end int64) {
	s.q.push(sealedBuf{end: end, buf: buf})
}

// recycle gives back the buffers whose bytes all lie before applied (the
// output offset up to which gnet has taken the bytes handed to it).
func (s *sealedBufs) recycle(applied int64) {
	for s.q.len() > 0 && s.q.front().end <= applied {
		putCipherBuf(s.q.pop().buf)
	}
}
