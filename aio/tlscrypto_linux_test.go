package aio

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCryptoTLSServerCPU is the ceiling crypto/tls sets on one core:
// full server handshakes back to back over net.Pipe (ECDSA P-256
// certificate, X25519 key exchange and a crypto/tls client offering what
// wrk's OpenSSL 3.0 offers), with nothing of ours in the way. The
// server's goroutine is locked to its thread, and the thread's CPU time
// (RUSAGE_THREAD) around each Handshake is the server side's cost alone:
// server-µs/op, and its inverse, handshakes/s on one core. (The client's
// CPU and the collector's background work are not in it.)
//
//	go test -run XXX -bench CryptoTLSServerCPU -benchtime 2000x ./aio/
func BenchmarkCryptoTLSServerCPU(b *testing.B) {
	configs := cryptoTLSConfigs(b)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		b.Run(tls.VersionName(v), func(b *testing.B) {
			srvCfg, cliCfg := configs(v)
			conns := make(chan net.Conn)
			type result struct {
				cpu time.Duration
				err error
			}
			results := make(chan result)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for c := range conns {
					t0 := threadCPU()
					err := tls.Server(c, srvCfg).Handshake()
					results <- result{threadCPU() - t0, err}
				}
			}()
			defer close(conns)
			var cpu time.Duration
			b.ResetTimer()
			for range b.N {
				s, c := net.Pipe()
				conns <- s
				if err := tls.Client(c, cliCfg).Handshake(); err != nil {
					b.Fatal(err)
				}
				r := <-results
				if r.err != nil {
					b.Fatal(r.err)
				}
				cpu += r.cpu
				s.Close()
				c.Close()
			}
			perOp := float64(cpu.Microseconds()) / float64(b.N)
			b.ReportMetric(perOp, "server-µs/op")
			b.ReportMetric(1e6/perOp, "handshakes/s/core")
		})
	}
}

// threadCPU is the calling thread's CPU time, user and system.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHandshakePrimitives times the public-key operations of a
// server's full handshake one by one, to set beside `openssl speed
// ecdhx25519 ecdhp256 ecdsap256` (OpenSSL's "op" is the derivation alone;
// a TLS server also makes its key pair, which OpenSSL does by a fixed-base
// multiplication and Go's X25519 by a second ladder). cpu-µs/op is the
// thread's CPU time, as openssl speed divides by CPU time too: both stay
// meaningful on a shared machine.
func BenchmarkHandshakePrimitives(b *testing.B) {
	for _, curve := range []struct {
		name string
		c    ecdh.Curve
	}{{"X25519", ecdh.X25519()}, {"P-256", ecdh.P256()}} {
		peer, err := curve.c.GenerateKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("ECDH-"+curve.name+"/keygen", func(b *testing.B) {
			onThreadCPU(b, func() {
				if _, err := curve.c.GenerateKey(rand.Reader); err != nil {
					b.Fatal(err)
				}
			})
		})
		key, err := curve.c.GenerateKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("ECDH-"+curve.name+"/derive", func(b *testing.B) {
			onThreadCPU(b, func() {
				if _, err := key.ECDH(peer.PublicKey()); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
	sk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	digest := sha256.Sum256([]byte("the handshake transcript"))
	b.Run("ECDSA-P-256/sign", func(b *testing.B) {
		onThreadCPU(b, func() {
			if _, err := ecdsa.SignASN1(rand.Reader, sk, digest[:]); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// onThreadCPU runs op b.N times on one locked thread and reports the
// thread's CPU time per op.
func onThreadCPU(b *testing.B, op func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	for range b.N {
		op()
	}
	b.ReportMetric(float64((threadCPU()-t0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}
