package natstest_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/internal/natstest"
)

// TestRestartKeepsAddressAndStream: a client reconnects to the restarted
// server on its own, and a JetStream message stored before the restart
// is still there after it.
func TestRestartKeepsAddressAndStream(t *testing.T) {
	srv := natstest.Start(t, natstest.Config{StoreDir: t.TempDir()})
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s"}, Storage: nats.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish("s", []byte("kept")); err != nil {
		t.Fatal(err)
	}

	srv.Restart()
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the client did not reconnect to the restarted server")
	}
	var msg *nats.RawStreamMsg
	for deadline := time.Now().Add(30 * time.Second); ; {
		if msg, err = js.GetMsg("S", 1); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // JetStream may still be recovering its store
	}
	if err != nil {
		t.Fatalf("the message stored before the restart: %v", err)
	}
	if string(msg.Data) != "kept" {
		t.Fatalf("message %q after the restart, want %q", msg.Data, "kept")
	}
}

// TestStopTwice: Stop on a stopped server (as the test's cleanup does
// after the test stopped it) is harmless, and a core server has no
// JetStream.
func TestStopTwice(t *testing.T) {
	srv := natstest.Start(t, natstest.Config{})
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	if _, err := js.AccountInfo(); err == nil {
		t.Error("JetStream answers on a server started without a store")
	}
	srv.Stop()
	srv.Stop()
}

// TestLinkCutAndHeal: a client joined through a Link loses its connection
// when the link is cut, cannot reconnect while it stays cut (a message
// published by a client on the server directly does not reach it), and
// reconnects on its own once it is healed.
func TestLinkCutAndHeal(t *testing.T) {
	srv := natstest.Start(t, natstest.Config{})
	link := natstest.NewLink(t, srv.URL())
	events := make(chan string, 16)
	nc, err := nats.Connect(link.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { events <- "disconnected" }),
		nats.ReconnectHandler(func(*nats.Conn) { events <- "reconnected" }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	direct, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	got, err := nc.SubscribeSync("s")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	expect := func(want string) {
		t.Helper()
		select {
		case e := <-events:
			if e != want {
				t.Fatalf("event %q, want %q", e, want)
			}
		case <-time.After(30 * time.Second): // a hang guard
			t.Fatalf("no %q", want)
		}
	}

	link.Cut()
	expect("disconnected")
	// Reconnections are refused while cut: the client tries many times
	// (every 10 ms) and stays away, so it misses what is published.
	if err := direct.Publish("s", []byte("missed")); err != nil {
		t.Fatal(err)
	}
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	if nc.IsConnected() {
		t.Fatal("the client reconnected through a cut link")
	}

	link.Heal()
	expect("reconnected")
	if err := nc.Flush(); err != nil { // the subscription is back on the server
		t.Fatal(err)
	}
	if err := direct.Publish("s", []byte("after")); err != nil {
		t.Fatal(err)
	}
	m, err := got.NextMsg(30 * time.Second)
	if err != nil || string(m.Data) != "after" {
		t.Fatalf("first message after the heal: %v, %v; want %q (the one published while cut is missed)", m, err, "after")
	}
}
