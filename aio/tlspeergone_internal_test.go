package aio

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// TestHandshakeCompleteWhenPeerClosesAfterLastFlight: a TLS 1.2 server's
// handshake ends with its own last flight (ChangeCipherSpec, Finished);
// a client that closes as soon as it has read it (its handshake done)
// may be seen closing by the event loop before the server's handshake
// goroutine has marked the session established. That handshake is
// counted as completed, not as a failure "peer gone". Here the close
// comes inside the write of that flight, the tightest such race.
func TestHandshakeCompleteWhenPeerClosesAfterLastFlight(t *testing.T) {
	f := newTLSFixture(t, TLSConfig{})
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	p := &memPair{}
	p.cliT = newTLSTransport(addr, addr, p.serverInput)
	flights := 0
	p.srv = newTLSSession(true, f.srvCfg, addr, addr, func(b []byte) error {
		p.cliT.Feed(b)
		if flights++; flights == 2 { // the last flight: the client is done and closes
			p.srv.ended()
		}
		return nil
	})
	p.cli = tls.Client(p.cliT, f.clientConfig("localhost", tls.VersionTLS12))
	srvDone := make(chan error, 1)
	if err := f.hs.submit(p.srv, func(err error) { srvDone <- err }); err != nil {
		t.Fatal(err)
	}
	if err := p.cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-srvDone:
		if err != nil {
			t.Fatalf("server's handshake: %v", err)
		}
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the server's handshake did not end")
	}
	if st := f.hs.Stats(); st.Handshakes != 1 || st.TLS12 != 1 || st.PeerGone != 0 {
		t.Fatalf("a completed handshake whose client closed at once, counted as %+v", st)
	}
}
