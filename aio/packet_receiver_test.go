package aio

import (
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
