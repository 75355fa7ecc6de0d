package aio

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestEncryptLockedGivesEachWriteItsRecords seals several writes at once
// and checks that each write's share of the ciphertext ends at or after
// the record holding its last byte (so its completion never comes before
// its bytes are out), and that the whole decrypts to the writes in order.
func TestEncryptLockedGivesEachWriteItsRecords(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	cases := []struct {
		name  string
		sizes []int // 0: a flush (no bytes)
	}{
		{"one write", []int{10}},
		{"two writes share a record", []int{10, 20}},
		{"writes across records", []int{20000, 10, 30000}},
		{"a flush between", []int{100, 0, 40000}},
		{"whole records", []int{maxPlaintext, maxPlaintext}},
		{"only a flush", []int{0}},
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s", tls.VersionName(v), tc.name), func(t *testing.T) {
				p := newMemPair(f.srvCfg, f.clientConfig("localhost", v))
				if err := f.handshake(t, p); err != nil {
					t.Fatal(err)
				}
				p.cliT.SetBlocking(false)
				got := readAvailable(t, p.cli) // TLS 1.3 session tickets
				var want []byte
				var ops []writeOp
				var ends []int // plaintext end of each write
				for i, n := range tc.sizes {
					b := bytes.Repeat([]byte{byte('a' + i)}, n)
					want = append(want, b...)
					ends = append(ends, len(want))
					if n == 0 {
						ops = append(ops, writeOp{})
						continue
					}
					// data and two bufs, as a Write of a header and a body
					ops = append(ops, writeOp{data: b[:n/3], bufs: [][]byte{b[n/3 : n/2], b[n/2:]}, n: n})
				}
				c := &Connection{tls: p.srv}
				out, err := c.encryptLocked(ops)
				if err != nil {
					t.Fatal(err)
				}
				if len(out) != len(ops) {
					t.Fatalf("%d ops out of %d", len(out), len(ops))
				}
				for i, op := range out {
					if op.n != len(op.data) || len(op.bufs) != 0 {
						t.Fatalf("op %d: n %d, %d bytes of data, %d bufs", i, op.n, len(op.data), len(op.bufs))
					}
					p.cliT.Feed(op.data)
					got = append(got, readAvailable(t, p.cli)...)
					if len(got) < ends[i] {
						t.Fatalf("op %d: its ciphertext decrypts to %d bytes, its last byte is at %d", i, len(got), ends[i])
					}
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("decrypted %d bytes, want %d", len(got), len(want))
				}
			})
		}
	}
}

// readAvailable reads what c can decrypt without waiting.
func readAvailable(t *testing.T, c *tls.Conn) []byte {
	t.Helper()
	var got []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if errors.Is(err, errWouldBlock) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandshakeEndsWhenItsQueuedStepNeverRuns: a handshake whose next
// step waits on a stage that never runs it (shut down) ends when its
// connection does, counted, instead of staying parked.
func TestHandshakeEndsWhenItsQueuedStepNeverRuns(t *testing.T) {
	f := newTLSFixtureStopped(t, TLSConfig{}) // no workers: queued steps wait
	srvCfg := f.srvCfg.Clone()
	srvCfg.ClientAuth = tls.RequestClientCert // the last step is queued, not run inline
	p := newMemPair(srvCfg, f.clientConfig("localhost", tls.VersionTLS13))
	done := make(chan error, 1)
	p.srv.hs, p.srv.done = f.hs, func(err error) { done <- err }
	cliDone := make(chan error, 1)
	go func() { cliDone <- p.cli.Handshake() }() // sends its ClientHello
	waitUntil(t, func() bool { return p.srv.tr.Buffered() > 0 }, "the ClientHello")
	p.srv.step() // as a worker: the server's flight; the client's Finished queues the next step
	if err := <-cliDone; err != nil {
		t.Fatal(err)
	}
	if !p.srv.queued.Load() {
		t.Fatal("the handshake's next step is not queued")
	}
	p.srv.ended() // the connection closed
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the handshake succeeded without its last step")
		}
	case <-time.After(30 * time.Second): // a hang guard, not a threshold
		t.Fatal("the handshake goroutine stayed parked")
	}
	if st := f.hs.Stats(); st.PeerGone != 1 || st.Handshakes != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
