package gnutella_test

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
)

func id(b byte) gnutella.ID {
	var x gnutella.ID
	for i := range x {
		x[i] = b + byte(i)
	}
	return x
}

func TestDescriptorRoundTrip(t *testing.T) {
	ip := netip.MustParseAddr("10.1.2.3")
	tests := []struct {
		name    string
		typ     gnutella.Type
		payload []byte
	}{
		{"ping", gnutella.TypePing, nil},
		{"pong", gnutella.TypePong, gnutella.Pong{Port: 6346, IP: ip, Files: 7, KBytes: 9000}.Append(nil)},
		{"query", gnutella.TypeQuery, gnutella.Query{MinSpeed: 56, Search: "seda thesis"}.Append(nil)},
		{"queryhit", gnutella.TypeQueryHit, gnutella.QueryHit{Port: 1, IP: ip, Speed: 3, ServentID: id(9),
			Results: []gnutella.Result{{Index: 1, Size: 100, Name: "a.txt"}, {Index: 2, Size: 0, Name: ""}}}.Append(nil)},
		{"push", gnutella.TypePush, gnutella.Push{ServentID: id(4), Index: 5, IP: ip, Port: 80}.Append(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := gnutella.Descriptor{Header: gnutella.Header{ID: id(1), Type: tt.typ, TTL: 7, Hops: 0}, Payload: tt.payload}
			b := d.Bytes()
			if len(b) != gnutella.HeaderLen+len(tt.payload) {
				t.Fatalf("encoded %d bytes", len(b))
			}
			got, n, err := gnutella.Decode(b, 0)
			if err != nil || n != len(b) {
				t.Fatalf("Decode = %d, %v", n, err)
			}
			if got.ID != d.ID || got.Type != tt.typ || got.TTL != 7 || !bytes.Equal(got.Payload, tt.payload) {
				t.Fatalf("round trip: %+v", got)
			}
			// Every strict prefix is incomplete, not an error.
			for i := 0; i < len(b); i++ {
				if _, n, err := gnutella.Decode(b[:i], 0); n != 0 || err != nil {
					t.Fatalf("prefix %d: n=%d err=%v", i, n, err)
				}
			}
		})
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	ip := netip.MustParseAddr("192.168.0.1")
	pong := gnutella.Pong{Port: 6346, IP: ip, Files: 1, KBytes: 2}
	if got, err := gnutella.ParsePong(pong.Append(nil)); err != nil || got != pong {
		t.Fatalf("pong %+v %v", got, err)
	}
	q := gnutella.Query{MinSpeed: 9, Search: "x y"}
	if got, err := gnutella.ParseQuery(q.Append(nil)); err != nil || got != q {
		t.Fatalf("query %+v %v", got, err)
	}
	h := gnutella.QueryHit{Port: 2, IP: ip, Speed: 5, ServentID: id(3), Results: []gnutella.Result{{1, 2, "f"}}}
	if got, err := gnutella.ParseQueryHit(h.Append(nil)); err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("queryhit %+v %v", got, err)
	}
	p := gnutella.Push{ServentID: id(8), Index: 3, IP: ip, Port: 1}
	if got, err := gnutella.ParsePush(p.Append(nil)); err != nil || got != p {
		t.Fatalf("push %+v %v", got, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	hdr := func(typ gnutella.Type, length uint32) []byte {
		return gnutella.AppendHeader(nil, gnutella.Header{Type: typ, TTL: 1, Length: length})
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"unknown type", hdr(0x42, 0), gnutella.ErrUnknownType},
		{"oversized", hdr(gnutella.TypeQuery, 1<<20), gnutella.ErrTooLarge},
		{"oversized huge", hdr(gnutella.TypeQuery, 0xffffffff), gnutella.ErrTooLarge},
		{"ping with payload", append(hdr(gnutella.TypePing, 1), 0), gnutella.ErrMalformed},
		{"short pong", append(hdr(gnutella.TypePong, 3), 1, 2, 3), gnutella.ErrMalformed},
		{"short push", append(hdr(gnutella.TypePush, 2), 1, 2), gnutella.ErrMalformed},
		{"query without NUL", append(hdr(gnutella.TypeQuery, 4), 0, 0, 'a', 'b'), gnutella.ErrMalformed},
		{"queryhit truncated", append(hdr(gnutella.TypeQueryHit, 27), append([]byte{3}, make([]byte, 26)...)...), gnutella.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, n, err := gnutella.Decode(tt.b, 4096)
			if !errors.Is(err, tt.want) || n != 0 {
				t.Fatalf("Decode = %d, %v; want %v", n, err, tt.want)
			}
		})
	}
}

func TestParserStream(t *testing.T) {
	var stream []byte
	var want []gnutella.Descriptor
	for i := 0; i < 50; i++ {
		d := gnutella.Descriptor{Header: gnutella.Header{ID: id(byte(i)), Type: gnutella.TypeQuery, TTL: 5, Hops: 1},
			Payload: gnutella.Query{Search: string(bytes.Repeat([]byte{'a'}, i))}.Append(nil)}
		want = append(want, d)
		stream = d.AppendTo(stream)
	}
	for _, chunk := range []int{1, 7, 23, 100, len(stream)} {
		var p gnutella.Parser
		var got []gnutella.Descriptor
		for off := 0; off < len(stream); off += chunk {
			var err error
			got, err = p.Feed(stream[off:min(off+chunk, len(stream))], got)
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != len(want) || p.Buffered() != 0 {
			t.Fatalf("chunk %d: %d descriptors, %d buffered", chunk, len(got), p.Buffered())
		}
		for i := range got {
			if got[i].ID != want[i].ID || !bytes.Equal(got[i].Payload, want[i].Payload) {
				t.Fatalf("chunk %d: descriptor %d differs", chunk, i)
			}
		}
	}
}

func TestParserStopsAtError(t *testing.T) {
	p := gnutella.Parser{MaxPayload: 100}
	ok := (&gnutella.Descriptor{Header: gnutella.Header{Type: gnutella.TypePing, TTL: 1}}).Bytes()
	bad := gnutella.AppendHeader(nil, gnutella.Header{Type: gnutella.TypeQuery, Length: 101})
	got, err := p.Feed(append(ok, bad...), nil)
	if len(got) != 1 || !errors.Is(err, gnutella.ErrTooLarge) {
		t.Fatalf("got %d, %v", len(got), err)
	}
	if _, err := p.Feed(ok, nil); !errors.Is(err, gnutella.ErrTooLarge) {
		t.Fatalf("after error: %v", err)
	}
}

func TestHandshake(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		fail bool
	}{
		{"GNUTELLA CONNECT/0.4\n\n", 22, false},
		{"GNUTELLA CONNECT/0.4\n\nxyz", 22, false},
		{"GNUTELLA CON", 0, false},
		{"", 0, false},
		{"GET / HTTP/1.0\r\n\r\n", 0, true},
		{"GNUTELLA CONNECT/0.6\r\n", 0, true},
	}
	for _, tt := range tests {
		n, err := gnutella.Handshake([]byte(tt.in), gnutella.Connect)
		if n != tt.n || (err != nil) != tt.fail || (err != nil && !errors.Is(err, gnutella.ErrHandshake)) {
			t.Errorf("Handshake(%q) = %d, %v", tt.in, n, err)
		}
	}
}

// FuzzParser feeds arbitrary bytes, split at an arbitrary point, to a
// Parser: it must never panic, never hold more than one bounded partial
// descriptor, and every descriptor it returns must re-encode to the bytes
// it came from.
func FuzzParser(f *testing.F) {
	ping := (&gnutella.Descriptor{Header: gnutella.Header{ID: id(1), Type: gnutella.TypePing, TTL: 7}}).Bytes()
	query := (&gnutella.Descriptor{Header: gnutella.Header{ID: id(2), Type: gnutella.TypeQuery, TTL: 7},
		Payload: gnutella.Query{Search: "x"}.Append(nil)}).Bytes()
	hit := (&gnutella.Descriptor{Header: gnutella.Header{ID: id(3), Type: gnutella.TypeQueryHit, TTL: 7},
		Payload: gnutella.QueryHit{ServentID: id(5), Results: []gnutella.Result{{1, 2, "n"}}}.Append(nil)}).Bytes()
	f.Add(ping, 3)
	f.Add(append(ping, query...), 30)
	f.Add(hit, 10)
	f.Add(gnutella.AppendHeader(nil, gnutella.Header{Type: gnutella.TypePush, Length: 0xffffffff}), 0)
	f.Add([]byte("GNUTELLA CONNECT/0.4\n\n"), 5)
	const max = 512
	f.Fuzz(func(t *testing.T, data []byte, split int) {
		if split < 0 || split > len(data) {
			split = len(data) / 2
		}
		p := gnutella.Parser{MaxPayload: max}
		got, err1 := p.Feed(data[:split], nil)
		got, err2 := p.Feed(data[split:], got)
		if err1 != nil && !errors.Is(err2, err1) {
			t.Fatalf("error not sticky: %v then %v", err1, err2)
		}
		if p.Buffered() >= gnutella.HeaderLen+max {
			t.Fatalf("holding %d bytes", p.Buffered())
		}
		var re []byte
		for i := range got {
			if err := got[i].Validate(); err != nil {
				t.Fatalf("returned an invalid descriptor: %v", err)
			}
			re = got[i].AppendTo(re)
		}
		if !bytes.HasPrefix(data, re) {
			t.Fatalf("descriptors do not re-encode to the input")
		}
		if err2 == nil && len(re)+p.Buffered() != len(data) {
			t.Fatalf("%d bytes decoded + %d buffered != %d", len(re), p.Buffered(), len(data))
		}
	})
}
