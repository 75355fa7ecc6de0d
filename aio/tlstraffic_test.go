package aio

import (
	"bytes"
	"crypto/tls"
	"io"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestTLSRepliesDuringTrafficWrittenByTheLoop: on an established TLS
// connection, what the application writes while the event loop delivers
// the decrypted input (an answer given where the request was parsed) is
// sealed and written by the loop when the delivery ends, in one write,
// without gnet's AsyncWrite (its eventfd wake-up and loop task); a write
// from another goroutine is still handed over with AsyncWrite. Before,
// every TLS reply took the AsyncWrite hand-off.
func TestTLSRepliesDuringTrafficWrittenByTheLoop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version uint16
	}{
		{"TLS 1.3", tls.VersionTLS13},
		{"TLS 1.2", tls.VersionTLS12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTLSFixture(t, TLSConfig{})
			owner := newRecorder("owner")
			srv := listen(t, SocketConfig{TLS: &TLSConfig{Config: f.srvCfg}}, owner, Env{Manager: f.m})
			client, err := tls.Dial("tcp", srv.Addr().String(), &tls.Config{RootCAs: f.roots, ServerName: "localhost",
				MinVersion: tc.version, MaxVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			evs := owner.wait(t, "connection", func(evs []sink.Event) bool { return count[*Connection](evs) == 1 })
			c, _ := first[*Connection](evs)
			done := make(chan error, 64)
			echo := replyTwiceSink(c, done)
			if err := c.StartReader(echo); err != nil {
				t.Fatal(err)
			}
			// The first record may arrive with the client's Finished, in
			// the handshake's last delivery: count from the second on.
			replyRound(t, client, done, 0)
			st0 := c.Stats()
			const rounds = 5
			for i := 1; i <= rounds; i++ {
				replyRound(t, client, done, i)
			}
			st := c.Stats()
			if loop, async := st.LoopWrites-st0.LoopWrites, st.AsyncWrites-st0.AsyncWrites; loop != rounds || async != 0 {
				t.Fatalf("loop writes %d, async writes %d; want %d and 0", loop, async, rounds)
			}

			// Outside a delivery: handed to gnet.
			writeOutsideDelivery(t, c, client, done)
			if st2 := c.Stats(); st2.AsyncWrites-st.AsyncWrites != 1 || st2.LoopWrites != st.LoopWrites {
				t.Fatalf("after a write from the test: loop writes %d, async writes %d; want 0 and 1",
					st2.LoopWrites-st.LoopWrites, st2.AsyncWrites-st.AsyncWrites)
			}
		})
	}
}

// replyTwiceSink answers every packet on c with "re:" and the packet, in
// two writes whose completions go to done.
func replyTwiceSink(c *Connection, done chan error) fnSink {
	return func(e sink.Event) error {
		p, ok := e.(Packet)
		if !ok {
			return nil
		}
		// Two writes per packet: both leave in the loop's one write.
		reply := append([]byte("re:"), p.Data...)
		if err := c.Write(reply[:3], nil, func(err error) { done <- err }); err != nil {
			return err
		}
		return c.Write(reply[3:], nil, func(err error) { done <- err })
	}
}

// replyRound sends round i's message to a replyTwiceSink, checks its
// answer and waits for both writes' completions.
func replyRound(t *testing.T, client io.ReadWriter, done chan error, i int) {
	t.Helper()
	msg := []byte{'a' + byte(i), '\n'}
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3+len(msg))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if want := append([]byte("re:"), msg...); !bytes.Equal(got, want) {
		t.Fatalf("round %d: got %q, want %q", i, got, want)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("round %d: completion %v", i, err)
		}
	}
}

// writeOutsideDelivery writes "late" on c from the test's goroutine (no
// delivery under way), reads it on client and waits for its completion.
func writeOutsideDelivery(t *testing.T, c *Connection, client io.Reader, done chan error) {
	t.Helper()
	if err := c.Write([]byte("late"), nil, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "late" {
		t.Fatalf("got %q, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
