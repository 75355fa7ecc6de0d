package aio_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandstorm-go/sandstorm/aio"
)

// TestTLSClientClosingAfterItsHandshakeCountsAsHandshake: clients whose
// handshake completed (tls.Dial returned: a TLS 1.3 client has sent its
// Finished) and that close at once, as `openssl s_time -new` does — with
// close_notify, with a bare FIN, or with a RST (unread session tickets
// in its receive buffer) — are counted as completed handshakes, not as
// failures "peer gone". One handshake worker and several clients at once
// make the server's last step queue behind the others, so that the close
// can arrive before it ran.
func TestTLSClientClosingAfterItsHandshakeCountsAsHandshake(t *testing.T) {
	closes := []struct {
		name  string
		close func(*tls.Conn)
	}{
		{"close_notify", func(c *tls.Conn) { _ = c.Close() }},
		{"FIN", func(c *tls.Conn) { _ = c.NetConn().Close() }},
		{"RST", func(c *tls.Conn) {
			_ = c.NetConn().(*net.TCPConn).SetLinger(0)
			_ = c.NetConn().Close()
		}},
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, cl := range closes {
			t.Run(fmt.Sprintf("%s/%s", tls.VersionName(version), cl.name), func(t *testing.T) {
				addr, roots, hs, _ := tlsEcho(t, aio.TLSConfig{Stage: aio.HandshakeStageConfig{
					Name: "aio.tls." + t.Name(), Workers: 1}})
				const clients, rounds = 8, 25
				var wg sync.WaitGroup
				errs := make(chan error, clients)
				for range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range rounds {
							conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost",
								MinVersion: version, MaxVersion: version})
							if err != nil {
								errs <- err
								return
							}
							cl.close(conn)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				waitFor(t, func() bool { return settled(hs.Stats()) >= clients*rounds }, "every handshake counted")
				if st := hs.Stats(); st.Handshakes != clients*rounds || settled(st) != clients*rounds {
					t.Fatalf("%d handshakes completed by their clients, counted: %+v", clients*rounds, st)
				}
			})
		}
	}
}

// TestTLSOpenSSLSTimeCountsHandshakes runs `openssl s_time -new` (four at
// once, two seconds), the client of the review item: it closes as soon
// as each handshake is done. Every connection it completed is counted as
// a completed handshake and none as "peer gone". (The server may count a
// few more: connections s_time gave up on at its time limit after the
// server's side was done.) Skipped without openssl.
func TestTLSOpenSSLSTimeCountsHandshakes(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	completedRE := regexp.MustCompile(`(\d+) connections in [\d.]+s;`)
	for _, version := range []string{"-tls1_2", "-tls1_3"} {
		t.Run(version, func(t *testing.T) {
			addr, _, hs, _ := tlsEcho(t, aio.TLSConfig{Stage: aio.HandshakeStageConfig{Name: "aio.tls." + t.Name(), Workers: 1}})
			var wg sync.WaitGroup
			var completed atomic.Uint64
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := exec.Command("openssl", "s_time", "-connect", addr, "-new", "-time", "2", version).CombinedOutput()
					m := completedRE.FindSubmatch(out)
					if err != nil || m == nil {
						t.Errorf("openssl s_time: %v\n%s", err, out)
						return
					}
					n, _ := strconv.ParseUint(string(m[1]), 10, 64)
					completed.Add(n)
				}()
			}
			wg.Wait()
			waitFor(t, func() bool { return settled(hs.Stats()) >= completed.Load() }, "the server's count of every handshake s_time completed")
			st := hs.Stats()
			t.Logf("s_time completed %d handshakes; the server counted %+v", completed.Load(), st)
			if st.PeerGone != 0 || st.OtherFailures != 0 || st.Handshakes < completed.Load() || completed.Load() == 0 {
				t.Fatalf("s_time completed %d handshakes; the server counted %+v", completed.Load(), st)
			}
		})
	}
}

// settled is the number of handshakes whose outcome is counted.
func settled(st aio.TLSStats) uint64 {
	return st.Handshakes + st.Refused + st.Timeouts + st.NotTLS + st.PeerGone + st.OtherFailures
}
