package aio

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"testing"
)

// BenchmarkCryptoTLSHandshake is the rate with only the crypto left: full
// handshakes (ECDSA P-256, no resumption) between a crypto/tls server and
// client over net.Pipe, both ends in this process, X25519 key exchange
// (what wrk's OpenSSL 3.0 offers; Go's default X25519MLKEM768 costs more).
// bench/tls.sh runs it beside the servers to show what crypto/tls itself
// allows.
func BenchmarkCryptoTLSHandshake(b *testing.B) {
	configs := cryptoTLSConfigs(b)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		b.Run(tls.VersionName(v), func(b *testing.B) {
			srvCfg, cliCfg := configs(v)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a, c := net.Pipe()
					srv := tls.Server(a, srvCfg)
					errc := make(chan error, 1)
					go func() { errc <- srv.Handshake() }()
					if err := tls.Client(c, cliCfg).Handshake(); err != nil {
						b.Error(err)
					}
					if err := <-errc; err != nil {
						b.Error(err)
					}
					a.Close()
					c.Close()
				}
			})
		})
	}
}

// cryptoTLSConfigs returns, for a TLS version, a crypto/tls server
// configuration with a fresh ECDSA P-256 certificate and a client's that
// trusts it and offers X25519 alone (as wrk's OpenSSL 3.0 sends its key
// share).
func cryptoTLSConfigs(b *testing.B) func(version uint16) (srv, cli *tls.Config) {
	cert, err := SelfSigned(0, "localhost")
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	return func(v uint16) (*tls.Config, *tls.Config) {
		return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: v, MaxVersion: v},
			&tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: v, MaxVersion: v,
				CurvePreferences: []tls.CurveID{tls.X25519}}
	}
}

// BenchmarkHandshakeStage is the same handshake with the server's side run
// in steps on the handshake stage over in-memory transports: its cost over
// BenchmarkCryptoTLSHandshake is the stage's.
func BenchmarkHandshakeStage(b *testing.B) {
	f := newTLSFixture(b, TLSConfig{})
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		b.Run(tls.VersionName(v), func(b *testing.B) {
			cliCfg := &tls.Config{RootCAs: f.roots, ServerName: "localhost", MinVersion: v, MaxVersion: v,
				CurvePreferences: []tls.CurveID{tls.X25519}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := f.handshake(b, newMemPair(f.srvCfg, cliCfg)); err != nil {
						b.Error(err)
					}
				}
			})
		})
	}
}

// BenchmarkTLSEcho is BenchmarkEcho's aio-inline server with TLS 1.3: the
// record path alone (handshakes happen before the timer starts). Each
// echo leaves as one Write of a header and the body in pieces (as an HTTP
// response does), so the encrypting side sees what a server writes.
//
//	go test -run XXX -bench TLSEcho -benchtime 20000x ./aio/
func BenchmarkTLSEcho(b *testing.B) {
	for _, load := range []struct{ conns, size int }{{16, 512}, {16, 4 << 10}, {16, 64 << 10}} {
		b.Run(fmt.Sprintf("c%d-%dB", load.conns, load.size), func(b *testing.B) {
			addr, roots, stop := startTLSInlineEcho(b)
			defer stop()
			cliCfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}
			runEchoLoadDial(b, load.conns, load.size, func() (net.Conn, error) {
				c, err := tls.Dial("tcp", addr, cliCfg)
				if err != nil {
					return nil, err
				}
				return c, c.Handshake()
			})
		})
	}
}

// startTLSInlineEcho serves TLS on loopback and writes every packet back
// in three pieces (a 16-byte head, then the rest in two) as one Write.
func startTLSInlineEcho(b *testing.B) (string, *x509.CertPool, func()) {
	f := newTLSFixture(b, TLSConfig{})
	echo := inlineEcho(func(p Packet) error {
		d := p.Data
		head := min(16, len(d))
		mid := head + (len(d)-head)/2
		return p.Conn.Write(d[:head], [][]byte{d[head:mid], d[mid:]}, nil)
	})
	srv, err := Listen(SocketConfig{Addr: "127.0.0.1:0", TLS: &TLSConfig{Config: f.srvCfg}}, echo, Env{Manager: f.m})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Addr().String(), f.roots, func() { _ = srv.Close() }
}

// BenchmarkTLSConnection is one connection's whole life through the aio
// stack, as a full handshake's client sees it: dial, a full TLS 1.3
// handshake (no resumption), one 64-byte request echoed back, close. Its
// B/op and allocs/op hold the client's share too (the same in every
// run), so compare them run against run.
//
//	go test -run XXX -bench TLSConnection -benchtime 2000x ./aio/
func BenchmarkTLSConnection(b *testing.B) {
	addr, roots, stop := startTLSInlineEcho(b)
	defer stop()
	cliCfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13,
		CurvePreferences: []tls.CurveID{tls.X25519}}
	msg := pattern(1, 64)
	got := make([]byte, len(msg))
	b.ReportAllocs()
	for b.Loop() {
		c, err := tls.Dial("tcp", addr, cliCfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			b.Fatal(err)
		}
		_ = c.Close()
	}
}
