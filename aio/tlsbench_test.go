package aio

import (
	"crypto/tls"
	"crypto/x509"
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
	cert, err := SelfSigned(0, "localhost")
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		b.Run(tls.VersionName(v), func(b *testing.B) {
			srvCfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: v, MaxVersion: v}
			cliCfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: v, MaxVersion: v,
				CurvePreferences: []tls.CurveID{tls.X25519}}
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
