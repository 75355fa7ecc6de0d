package aio

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// packetRecorder is a PacketReceiver that records how each packet came:
// by value (ReceivePacket) or as an event (Enqueue), refusing while
// reject is set.
type packetRecorder struct {
	mu       sync.Mutex
	reject   bool
	byValue  []uint64
	asEvents []uint64
	order    []uint64
}

func (r *packetRecorder) take(p Packet, byValue bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reject {
		return fmt.Errorf("full: %w", sink.ErrRejected)
	}
	if byValue {
		r.byValue = append(r.byValue, p.Seq)
	} else {
		r.asEvents = append(r.asEvents, p.Seq)
	}
	r.order = append(r.order, p.Seq)
	return nil
}

func (r *packetRecorder) ReceivePacket(p Packet) error { return r.take(p, true) }

func (r *packetRecorder) Enqueue(e sink.Event) error { return r.take(e.(Packet), false) }

// A PacketReceiver is handed packets by value while nothing waits; a
// packet it refuses waits, with those sent after it, and all are offered
// again in order as Packet events; once the postbox is empty, packets go
// by value again. A plain Receiver gets every packet as an event.
func TestSendPacket(t *testing.T) {
	t.Run("PacketReceiver", func(t *testing.T) {
		rec := &packetRecorder{}
		o := postbox{}
		send := func(seq uint64) bool { return o.sendPacket(rec, Packet{Seq: seq, Data: []byte{byte(seq)}}) }
		if !send(1) {
			t.Fatal("packet 1 not delivered")
		}
		rec.reject = true
		if send(2) || send(3) || o.empty() {
			t.Fatal("packets to a refusing receiver reported delivered")
		}
		rec.reject = false
		if !o.drain() || !send(4) {
			t.Fatal("packets not delivered once the receiver takes them")
		}
		want := func(name string, got []uint64, seqs ...uint64) {
			if fmt.Sprint(got) != fmt.Sprint(seqs) {
				t.Errorf("%s %v, want %v", name, got, seqs)
			}
		}
		want("order", rec.order, 1, 2, 3, 4)
		want("by value", rec.byValue, 1, 4)
		want("as events", rec.asEvents, 2, 3)
	})
	t.Run("Receiver", func(t *testing.T) {
		rec := newRecorder("plain")
		o := postbox{}
		for seq := range uint64(3) {
			if !o.sendPacket(rec, Packet{Seq: seq}) {
				t.Fatalf("packet %d not delivered", seq)
			}
		}
		if got := rec.events(); len(got) != 3 || got[2].(Packet).Seq != 2 {
			t.Fatalf("events %v, want 3 packets in order", got)
		}
	})
}

// A packet handed by value allocates nothing in the postbox.
func TestSendPacketAllocations(t *testing.T) {
	rec := &packetRecorder{}
	o := postbox{}
	p := Packet{Seq: 1, Data: []byte("GET / HTTP/1.1\r\n\r\n")}
	rec.order = make([]uint64, 0, 1000)
	rec.byValue = make([]uint64, 0, 1000)
	if n := testing.AllocsPerRun(100, func() { o.sendPacket(rec, p) }); n != 0 {
		t.Fatalf("%.1f allocations per packet, want 0", n)
	}
}

// packetBorrower is a PacketBorrower that records the bytes of every
// packet, copying lent ones (as a borrower must) and keeping owned ones
// as they are, and how each came; it refuses while reject is set.
type packetBorrower struct {
	packetRecorder
	lent  []uint64
	bytes [][]byte
}

func (b *packetBorrower) BorrowPacket(p Packet) error {
	if err := b.take(p, true); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lent = append(b.lent, p.Seq)
	b.bytes = append(b.bytes, append([]byte(nil), p.Data...))
	return nil
}

func (b *packetBorrower) ReceivePacket(p Packet) error {
	panic("ReceivePacket called on a borrower with lent bytes to give")
}

func (b *packetBorrower) Enqueue(e sink.Event) error {
	if err := b.packetRecorder.Enqueue(e); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bytes = append(b.bytes, e.(Packet).Data) // owned: kept as is
	return nil
}

// A lent packet is handed to the borrower while nothing waits; one that
// is refused, or sent while others wait, is copied before it waits, so
// that the lender may reuse its buffer at once: every packet arrives with
// the bytes it had when it was sent, in order.
func TestLendPacket(t *testing.T) {
	b := &packetBorrower{}
	o := postbox{}
	buf := make([]byte, 4) // the lender's buffer, overwritten after each send
	send := func(seq uint64) bool {
		copy(buf, fmt.Sprintf("p%03d", seq))
		ok := o.lendPacket(b, Packet{Seq: seq, Data: buf})
		copy(buf, "XXXX")
		return ok
	}
	if !send(1) {
		t.Fatal("packet 1 not delivered")
	}
	b.reject = true
	if send(2) || send(3) || o.empty() {
		t.Fatal("packets to a refusing borrower reported delivered")
	}
	b.reject = false
	if !o.drain() || !send(4) {
		t.Fatal("packets not delivered once the borrower takes them")
	}
	if got := fmt.Sprint(b.order); got != "[1 2 3 4]" {
		t.Errorf("order %s, want [1 2 3 4]", got)
	}
	if got := fmt.Sprint(b.lent); got != "[1 4]" {
		t.Errorf("lent %s, want [1 4] (2 and 3 waited, owned)", got)
	}
	if got := fmt.Sprintf("%s", b.bytes); got != "[p001 p002 p003 p004]" {
		t.Errorf("bytes %s, want [p001 p002 p003 p004]", got)
	}
}

// A lent packet allocates nothing: neither its bytes nor an event.
func TestLendPacketAllocations(t *testing.T) {
	var got int
	b := borrowFunc(func(p Packet) error { got += len(p.Data); return nil })
	o := postbox{}
	p := Packet{Seq: 1, Data: []byte("GET / HTTP/1.1\r\n\r\n")}
	if n := testing.AllocsPerRun(100, func() { o.lendPacket(b, p) }); n != 0 {
		t.Fatalf("%.1f allocations per packet, want 0", n)
	}
	if got == 0 {
		t.Fatal("no packet borrowed")
	}
}

type borrowFunc func(Packet) error

func (f borrowFunc) BorrowPacket(p Packet) error  { return f(p) }
func (f borrowFunc) ReceivePacket(p Packet) error { return f(p) }
func (f borrowFunc) Enqueue(e sink.Event) error   { return f(e.(Packet)) }

// Over a real socket, a PacketBorrower reader is lent the event loop's
// buffer for every packet of a plain connection, and packets it refuses
// are delivered later, intact and in order: the bytes received are the
// bytes sent.
func TestBorrowerReadsFromTheLoopBuffer(t *testing.T) {
	checkLeaks(t)
	_, _, c, client := serverConn(t, SocketConfig{})
	b := &packetBorrower{}
	var mu sync.Mutex
	refuse := 0
	reader := borrowFunc(func(p Packet) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse > 0 && p.Seq%3 == 0 {
			refuse--
			return fmt.Errorf("full: %w", sink.ErrRejected)
		}
		return b.BorrowPacket(p)
	})
	enqueue := fnSink(func(e sink.Event) error {
		if p, ok := e.(Packet); ok {
			mu.Lock()
			defer mu.Unlock()
			return b.Enqueue(p)
		}
		return nil
	})
	if err := c.StartReader(lendingSink{reader, enqueue}); err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i := range 30 {
		mu.Lock()
		refuse = i % 2
		mu.Unlock()
		msg := pattern(i, 100+i)
		want = append(want, msg...)
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		waitCond(t, "the message", func() bool {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, p := range b.bytes {
				n += len(p)
			}
			return n == len(want)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if got := bytes.Join(b.bytes, nil); !bytes.Equal(got, want) {
		t.Fatal("bytes received differ from the bytes sent")
	}
	if len(b.lent) == 0 || len(b.asEvents) == 0 {
		t.Fatalf("%d packets lent, %d as events: want both", len(b.lent), len(b.asEvents))
	}
}

// lendingSink is a sink.Sink whose packets go to a PacketBorrower.
type lendingSink struct {
	borrowFunc
	fnSink
}

func (s lendingSink) Enqueue(e sink.Event) error { return s.fnSink.Enqueue(e) }
