package aio

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

func TestCipherBufSizes(t *testing.T) {
	cases := []struct {
		n, wantCap int
	}{
		{0, 4 << 10},
		{1, 4 << 10},
		{4 << 10, 4 << 10},
		{4<<10 + 1, 8 << 10},
		{100 << 10, 128 << 10},
		{1 << 20, 1 << 20},
		{1<<20 + 1, 1<<20 + 1}, // beyond the pools: exactly what is asked
	}
	for _, tc := range cases {
		b := getCipherBuf(tc.n)
		if len(b) != 0 || cap(b) != tc.wantCap {
			t.Errorf("getCipherBuf(%d): len %d cap %d, want 0 and %d", tc.n, len(b), cap(b), tc.wantCap)
		}
	}
}

// TestSealedBufsRecycledOnceApplied: a sealed buffer goes back to its
// pool only when the output offset gnet has taken passes its last byte,
// never earlier, and in output order.
func TestSealedBufsRecycledOnceApplied(t *testing.T) {
	var s sealedBufs
	ends := []int64{100, 5000, 5001, 90000}
	for _, end := range ends {
		s.add(make([]byte, 10, 8<<10), end)
	}
	cases := []struct {
		applied int64
		left    int
	}{
		{0, 4},
		{99, 4},
		{100, 3},
		{5000, 2},
		{89999, 1},
		{90000, 0},
		{1 << 40, 0},
	}
	for _, tc := range cases {
		before := cipherBufStats.recycled.Load()
		had := s.q.len()
		s.recycle(tc.applied)
		if s.q.len() != tc.left {
			t.Fatalf("applied %d: %d buffers left, want %d", tc.applied, s.q.len(), tc.left)
		}
		if got := cipherBufStats.recycled.Load() - before; got < uint64(had-tc.left) {
			t.Fatalf("applied %d: %d recycled, want %d", tc.applied, got, had-tc.left)
		}
	}
}

// TestEncryptLockedRecyclesAfterApplied: encryptLocked keeps each sealed
// buffer until the connection's applied offset has passed it, and gives
// back those that have gone before sealing the next write.
func TestEncryptLockedRecyclesAfterApplied(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	p := newMemPair(f.srvCfg, f.clientConfig("localhost", tls.VersionTLS13))
	if err := f.handshake(t, p); err != nil {
		t.Fatal(err)
	}
	p.cliT.SetBlocking(false)
	readAvailable(t, p.cli) // session tickets
	c := &Connection{tls: p.srv}
	write := func(n int) []byte { // as submit: encrypt, then queue the bytes
		t.Helper()
		out, err := c.encryptLocked([]writeOp{{data: bytes.Repeat([]byte{'x'}, n), n: n}})
		if err != nil {
			t.Fatal(err)
		}
		c.queued += int64(out[0].n)
		return out[0].data
	}
	first := write(20000)
	second := write(100)
	if got := p.srv.sent.q.len(); got != 2 {
		t.Fatalf("%d sealed buffers kept, want 2 (nothing applied yet)", got)
	}
	c.applied = int64(len(first)) // gnet has taken the first write
	write(10)
	if got := p.srv.sent.q.len(); got != 2 {
		t.Fatalf("%d sealed buffers kept, want 2 (the first given back)", got)
	}
	if got := p.srv.sent.q.front().end; got != int64(len(first)+len(second)) {
		t.Fatalf("oldest kept buffer ends at %d, want %d", got, len(first)+len(second))
	}
	if _, err := c.encryptLocked([]writeOp{{}}); err != nil { // a flush: no ciphertext, nothing kept
		t.Fatal(err)
	}
	if got := p.srv.sent.q.len(); got != 2 {
		t.Fatalf("%d sealed buffers kept after a flush, want 2", got)
	}
}

// TestTLSPooledBuffersKeepBytesIntact: clients ask for several answers at
// once, so the server seals several writes of the same sizes in one visit
// of the event loop, before gnet has taken the first (a buffer recycled
// too early would be sealed over while still queued); they read through
// a small receive buffer, so gnet buffers output and the write window
// holds some back. Every byte arrives as sent, and the server recycles
// its sealed buffers.
func TestTLSPooledBuffersKeepBytesIntact(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	answer := func(round byte, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = round*31 + byte(i*7) + byte(i>>9)
		}
		return b
	}
	sizes := []int{5000, 70 << 10, 6000, 300 << 10, 7000, 16<<10 + 9}
	srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0", TLS: &TLSConfig{Config: f.srvCfg}},
		inlineEcho(func(p Packet) error {
			for _, round := range p.Data { // one byte per request
				b := answer(round, sizes[int(round)%len(sizes)])
				head := min(9, len(b))
				if err := p.Conn.Write(b[:head], [][]byte{b[head : len(b)/2], b[len(b)/2:]}, nil); err != nil {
					return err
				}
			}
			return nil
		}), Env{Manager: f.m})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	before := cipherBufStats.recycled.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- slowTLSClient(srv.Addr().String(), f.clientConfig("localhost", tls.VersionTLS13), 4, 6, sizes, answer)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if cipherBufStats.recycled.Load() == before {
		t.Fatal("no sealed buffer was recycled")
	}
}

// slowTLSClient asks for batches of answers, perBatch at a time in one
// write, reads them through a small receive buffer and checks their
// bytes.
func slowTLSClient(addr string, cfg *tls.Config, batches, perBatch int, sizes []int, answer func(byte, int) []byte) error {
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	_ = raw.(*net.TCPConn).SetReadBuffer(32 << 10)
	c := tls.Client(raw, cfg)
	for b := range batches {
		ask := make([]byte, perBatch)
		for i := range ask {
			ask[i] = byte(b*perBatch + i)
		}
		if _, err := c.Write(ask); err != nil {
			return err
		}
		for _, round := range ask {
			want := answer(round, sizes[int(round)%len(sizes)])
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil {
				return fmt.Errorf("answer %d: %w", round, err)
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("answer %d: the %d bytes differ", round, len(want))
			}
		}
	}
	return nil
}
