package aio

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
)

// tlsPair runs a handshake between a server and a client, each over a
// tlsTransport whose output feeds the other's input, and returns both
// with the server's transport switched to non-blocking reads.
func tlsPair(t *testing.T, version uint16) (srv, cli *tls.Conn, srvT, cliT *tlsTransport, toServer *bytes.Buffer) {
	t.Helper()
	cert, err := SelfSigned(0)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

	var mu sync.Mutex
	capturing := false
	toServer = new(bytes.Buffer)
	srvT = newTLSTransport(addr, addr, nil)
	cliT = newTLSTransport(addr, addr, func(p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if capturing {
			toServer.Write(p)
			return nil
		}
		srvT.Feed(p)
		return nil
	})
	srvT.out = func(p []byte) error { cliT.Feed(p); return nil }

	srv = tls.Server(srvT, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: version, MaxVersion: version})
	cli = tls.Client(cliT, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: version, MaxVersion: version})
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	srvT.SetBlocking(false)
	mu.Lock()
	capturing = true
	mu.Unlock()
	return srv, cli, srvT, cliT, toServer
}

// TestTLSReadResumesAfterTemporaryError pins the crypto/tls behaviour the
// TLS record stage depends on: a Read that meets a temporary net.Error in
// the middle of a record keeps the partial record, and a later Read
// resumes it. If a Go release makes that error sticky, this test fails.
func TestTLSReadResumesAfterTemporaryError(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			srv, cli, srvT, _, ciphertext := tlsPair(t, v)
			msg := bytes.Repeat([]byte("0123456789abcdef"), 1024) // one 16 KiB record
			if _, err := cli.Write(msg); err != nil {
				t.Fatal(err)
			}
			wire := append([]byte(nil), ciphertext.Bytes()...)
			if len(wire) <= len(msg) {
				t.Fatalf("captured %d bytes of ciphertext for %d of plaintext", len(wire), len(msg))
			}
			var got []byte
			buf := make([]byte, 32<<10)
			blocked := 0
			for i, b := range wire {
				srvT.Feed([]byte{b}) // one byte at a time
				for {
					n, err := srv.Read(buf)
					got = append(got, buf[:n]...)
					if err == nil {
						continue
					}
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Temporary() {
						t.Fatalf("byte %d of %d: Read: %v (want a temporary error)", i, len(wire), err)
					}
					blocked++
					break
				}
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("decrypted %d bytes, want %d identical bytes", len(got), len(msg))
			}
			if blocked < len(wire)-1 {
				t.Fatalf("Read returned would-block %d times for %d bytes fed one at a time", blocked, len(wire))
			}
		})
	}
}

func TestTLSTransportEOFAndClose(t *testing.T) {
	tr := newTLSTransport(nil, nil, func([]byte) error { return nil })
	tr.Feed([]byte("ab"))
	tr.FeedEOF()
	buf := make([]byte, 8)
	if n, err := tr.Read(buf); n != 2 || err != nil {
		t.Fatalf("Read = %d, %v; want 2, nil", n, err)
	}
	if _, err := tr.Read(buf); err != io.EOF {
		t.Fatalf("Read after EOF = %v; want io.EOF", err)
	}
	done := make(chan error, 1)
	tr2 := newTLSTransport(nil, nil, func([]byte) error { return nil })
	go func() { _, err := tr2.Read(buf); done <- err }()
	tr2.Close() // wakes the blocked Read
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked Read after Close = %v; want net.ErrClosed", err)
	}
	if _, err := tr2.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v; want net.ErrClosed", err)
	}
}

// TestTLSTransportHandsOneRecordPerRead: Read hands crypto/tls no byte
// past the end of the record it is in, whether the input was fed
// (copied) or lent, whole or cut anywhere, so that crypto/tls never holds
// more than the record it reads and drainLocked can stop once the
// transport is empty (without a Read that only finds nothing, an object
// of crypto/tls's each).
func TestTLSTransportHandsOneRecordPerRead(t *testing.T) {
	record := func(typ byte, n int) []byte {
		return append([]byte{typ, 3, 3, byte(n >> 8), byte(n)}, bytes.Repeat([]byte{typ}, n)...)
	}
	a, b, c := record(23, 3), record(23, 300), record(21, 2)
	stream := bytes.Join([][]byte{a, b, c}, nil)
	want := []int{len(a), len(b), len(c)}
	tests := []struct {
		name   string
		pieces []int // the stream fed in pieces of these lengths (the rest last)
		lend   bool
	}{
		{"one feed", nil, false},
		{"one lend", nil, true},
		{"cut inside a header", []int{len(a) + 2}, false},
		{"cut after a header", []int{len(a) + 5}, false},
		{"byte by byte", slices.Repeat([]int{1}, len(stream)-1), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTLSTransport(nil, nil, func([]byte) error { return nil })
			tr.SetBlocking(false)
			rest := stream
			var cuts [][]byte
			for _, n := range tc.pieces {
				cuts, rest = append(cuts, rest[:n]), rest[n:]
			}
			cuts = append(cuts, rest)
			buf := make([]byte, 1<<10)
			var reads []int
			end := 0 // bytes of the current record read so far
			for _, p := range cuts {
				if tc.lend {
					tr.lend(p)
				} else {
					tr.Feed(p)
				}
				for {
					n, err := tr.Read(buf)
					if err != nil {
						break
					}
					end += n
					if end > want[len(reads)] {
						t.Fatalf("read past the end of record %d: %d bytes of its %d", len(reads), end, want[len(reads)])
					}
					if end == want[len(reads)] {
						reads, end = append(reads, end), 0
					}
				}
				if tc.lend {
					tr.unlend()
				}
			}
			if !slices.Equal(reads, want) {
				t.Fatalf("records read whole: %v, want %v", reads, want)
			}
		})
	}
}
