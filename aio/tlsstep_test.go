package aio

import (
	"crypto/tls"
	"testing"
	"time"
)

// TestHandshakeLastStepInline: a TLS 1.3 server that asks for no client
// certificate checks the client's Finished on the goroutine that fed it
// (the event loop), without queueing a step; TLS 1.2 (whose last step
// computes the key exchange) and a server that asks for a certificate
// queue it on the stage. The stage here has no running workers, so a
// queued step stays queued.
func TestHandshakeLastStepInline(t *testing.T) {
	for _, tc := range []struct {
		name       string
		version    uint16
		clientAuth tls.ClientAuthType
		inline     bool
	}{
		{"TLS 1.3", tls.VersionTLS13, tls.NoClientCert, true},
		{"TLS 1.3 asking for a client certificate", tls.VersionTLS13, tls.RequestClientCert, false},
		{"TLS 1.2", tls.VersionTLS12, tls.NoClientCert, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTLSFixtureStopped(t, TLSConfig{})
			srvCfg := f.srvCfg.Clone()
			srvCfg.ClientAuth = tc.clientAuth
			p := newMemPair(srvCfg, f.clientConfig("localhost", tc.version))
			done := make(chan error, 1)
			p.srv.hs, p.srv.done = f.hs, func(err error) { done <- err }
			go func() { _ = p.cli.Handshake() }()
			waitUntil(t, func() bool { return p.srv.tr.Buffered() > 0 }, "ClientHello")
			p.srv.step() // as a worker: the server's flight
			var err error
			waitUntil(t, func() bool {
				select {
				case err = <-done:
					return true
				default:
					return p.srv.queued.Load()
				}
			}, "end of the handshake or queued step")
			if !tc.inline {
				if !p.srv.queued.Load() {
					t.Fatalf("the last step was not queued (handshake ended: %v)", err)
				}
				p.srv.ended() // release the parked coroutine
				select {
				case <-done:
				case <-time.After(30 * time.Second): // a hang guard
					t.Fatal("the released handshake did not end")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.srv.queued.Load() || !p.srv.ok.Load() {
				t.Fatalf("queued %v, established %v", p.srv.queued.Load(), p.srv.ok.Load())
			}
			if st := f.hs.Stats(); st.Handshakes != 1 || st.TLS13 != 1 {
				t.Fatalf("stats = %+v", st)
			}
		})
	}
}

func TestHasRecordOfType(t *testing.T) {
	rec := func(typ byte, n int) []byte {
		return append([]byte{typ, 3, 3, byte(n >> 8), byte(n)}, make([]byte, n)...)
	}
	join := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"empty", nil, false},
		{"TLS 1.2 flight", join(rec(22, 90), rec(22, 600), rec(22, 4)), false},
		{"TLS 1.3 flight", join(rec(22, 90), rec(20, 1), rec(23, 300), rec(23, 80)), true},
		{"after a long record", join(rec(22, 300), rec(23, 1)), true},
		{"cut short before it", join(rec(22, 300), rec(23, 1))[:200], false},
		{"a header alone", []byte{23, 3, 3, 0, 9}, true},
	} {
		if got := hasRecordOfType(tc.in, recordTypeApplicationData); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHandshakeRunnersReused: the coroutine that ran one handshake runs
// the next (its grown stack kept), at most max of them wait idle, and the
// ones stopped (beyond max, or when the stage ends) are over.
func TestHandshakeRunnersReused(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	var first *handshakeRunner
	for i := range 3 {
		p := newMemPair(f.srvCfg, f.clientConfig("localhost", tls.VersionTLS13))
		if err := f.handshake(t, p); err != nil {
			t.Fatal(err)
		}
		var idle []*handshakeRunner
		waitUntil(t, func() bool { // the runner is put back after done is called
			f.hs.runners.mu.Lock()
			defer f.hs.runners.mu.Unlock()
			idle = append(idle[:0], f.hs.runners.idle...)
			return len(idle) > 0
		}, "idle runner")
		if len(idle) != 1 {
			t.Fatalf("handshake %d: %d idle runners, want 1", i, len(idle))
		}
		if i == 0 {
			first = idle[0]
		} else if idle[0] != first {
			t.Fatalf("handshake %d ran on a new coroutine", i)
		}
	}

	pool := runnerPool{max: 1}
	a, b := newHandshakeRunner(), newHandshakeRunner()
	pool.put(a)
	pool.put(b) // beyond max: stopped
	if _, ok := b.next(); ok {
		t.Fatal("a runner beyond max is still running")
	}
	pool.close()
	if _, ok := a.next(); ok {
		t.Fatal("an idle runner is still running after close")
	}
	r := pool.get(nil)
	if r == a || r == b {
		t.Fatal("a closed pool handed out a stopped runner")
	}
	r.stop()
}
