package remote

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// point has a binary encoding of its own, which Register must prefer.
type point struct{ X, Y int32 }

func (p point) MarshalBinary() ([]byte, error) {
	b := binary.BigEndian.AppendUint32(nil, uint32(p.X))
	return binary.BigEndian.AppendUint32(b, uint32(p.Y)), nil
}

func (p *point) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return errors.New("point: want 8 bytes")
	}
	p.X, p.Y = int32(binary.BigEndian.Uint32(b)), int32(binary.BigEndian.Uint32(b[4:]))
	return nil
}

type withSink struct {
	N     int
	Reply sink.Sink
}

func testWire() *Wire {
	c := NewCodecs()
	Register[point](c, "point")
	Register[*withSink](c, "withSink")
	return newWire(&Node{node: "n", inst: "i1"}, c, 0)
}

func TestCodecs(t *testing.T) {
	w := testWire()
	q := sink.NewQueue(1)
	for _, tc := range []struct {
		name string
		in   sink.Event
		raw  string // the codec's bytes, if they matter
	}{
		{"string", "hello", `"hello"`},
		{"int", 42, "42"},
		{"bytes", []byte{1, 2}, ""},
		{"binary", point{1, 2}, "\x00\x00\x00\x01\x00\x00\x00\x02"},
		{"sink field", &withSink{N: 3, Reply: q}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := w.encodeEvents(nil, "S", []sink.Event{tc.in})
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != "" && !strings.Contains(string(b), tc.raw) {
				t.Errorf("encoded %q, want it to hold %q", b, tc.raw)
			}
			out, err := w.decodeEvents(&reader{b: b})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(out[0], tc.in) {
				t.Fatalf("round trip: %#v, want %#v", out[0], tc.in)
			}
		})
	}
	// The sink came back as itself on its own node.
	b, _ := w.encodeEvents(nil, "S", []sink.Event{&withSink{Reply: q}})
	out, _ := w.decodeEvents(&reader{b: b})
	if out[0].(*withSink).Reply != q {
		t.Fatal("a sink exported and imported on its node is not the original")
	}
}

func TestCodecErrors(t *testing.T) {
	w := testWire()
	_, err := w.encodeEvents(nil, "S", []sink.Event{struct{ A int }{1}})
	if !errors.Is(err, ErrNoCodec) || !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), `stage "S"`) {
		t.Fatalf("unregistered type: %v", err)
	}
	_, err = w.encodeEvents(nil, "S", []sink.Event{nil})
	if !errors.Is(err, ErrNoCodec) {
		t.Fatalf("nil event: %v", err)
	}
	b := appendString(binary.AppendUvarint(nil, 1), "nobody")
	b = appendBytes(b, nil)
	if _, err := w.decodeEvents(&reader{b: b}); !errors.Is(err, ErrNoCodec) {
		t.Fatalf("unknown codec name: %v", err)
	}
	type nested struct{ Inner struct{ S sink.Sink } }
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "below the top level") {
				t.Fatalf("a nested sink registered: %v", r)
			}
		}()
		Register[nested](NewCodecs(), "nested")
	}()
}

func TestVerdictRoundTrip(t *testing.T) {
	for _, v := range []*verdict{
		{status: statusOK, len: 3, inst: "x"},
		{status: statusRejected, inst: "x", detail: verdictDetail{Node: "b", Stage: "W", Predicate: "rate", Reason: "no tokens"}},
		{status: statusEach, inst: "x", each: []byte{statusOK, statusRejected}, why: []verdictDetail{{Reason: "full"}}},
	} {
		for _, version := range []int{legacyWire, WireVersion} {
			got, err := decodeVerdict(encodeVerdict(v, version))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, v) {
				t.Fatalf("version %d: got %+v, want %+v", version, got, v)
			}
		}
	}
}

type failingJSON struct{}

func (failingJSON) MarshalJSON() ([]byte, error) { return nil, errors.New("no JSON today") }

// TestAppendJSON: the JSON codec's encoding appended to a message is
// json.Marshal's, and an encoder's error leaves nothing behind.
func TestAppendJSON(t *testing.T) {
	for _, v := range []any{
		point{1, 2}, "<a & b>", 42, nil, map[string]any{"x": []int{1, 2}}, struct {
			S string `json:"s"`
		}{"\u2028 \"quoted\""},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendJSON([]byte("head"), v)
		if err != nil || string(got) != "head"+string(want) {
			t.Errorf("appendJSON(%v) = %q, %v; want %q", v, got, err, "head"+string(want))
		}
	}
	if got, err := appendJSON([]byte("head"), failingJSON{}); err == nil || got != nil {
		t.Errorf("appendJSON of a failing encoder = %q, %v; want an error", got, err)
	}
}

// FuzzDecode: no bytes from the network make the decoders panic.
func FuzzDecode(f *testing.F) {
	w := testWire()
	q, _ := w.encodeRequest(nil, &request{op: opEach, id: "a.1", events: []sink.Event{"x", point{1, 2}, 7}}, "S")
	f.Add(q)
	f.Add(encodeVerdict(&verdict{status: statusEach, each: []byte{0, 1}, why: []verdictDetail{{Reason: "r"}}}, WireVersion))
	f.Add([]byte{opEnqueue, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = w.decodeRequest(b)
		_, _ = decodeVerdict(b)
	})
}

// TestDecodeRuns: a run of JSON events of one type is decoded at once,
// with the same result as one by one, and a bad event in a run is still
// named by its own error.
func TestDecodeRuns(t *testing.T) {
	type pair struct {
		A int    `json:"a"`
		B string `json:"b"`
	}
	c := NewCodecs()
	Register[pair](c, "pair")
	Register[point](c, "point")
	w := newWire(&Node{node: "n", inst: "i1"}, c, 0)
	raw := func(items ...[2]string) []byte { // codec name, bytes
		b := binary.AppendUvarint(nil, uint64(len(items)))
		for _, it := range items {
			b = appendString(b, it[0])
			b = appendBytes(b, []byte(it[1]))
		}
		return b
	}
	// long and large runs are decoded in two halves on two goroutines
	long := make([]sink.Event, 3*splitRunAt)
	longRaw := make([][2]string, len(long))
	pad := strings.Repeat("x", splitRunBytes/splitRunAt)
	for i := range long {
		long[i] = pair{A: i, B: fmt.Sprint(i, pad)}
		longRaw[i] = [2]string{"pair", fmt.Sprintf(`{"a":%d,"b":%q}`, i, pad)}
	}
	if n := len(longRaw) * len(pad); n < 2*splitRunBytes {
		t.Fatalf("the long run holds %d bytes: too few to be split", n)
	}
	longRaw[len(longRaw)-1][1] = `{"a":` // a bad event in the second half
	for _, tc := range []struct {
		name    string
		in      []sink.Event // encoded with encodeEvents
		raw     []byte       // else these bytes
		want    []sink.Event
		wantErr string
	}{
		{name: "one type", in: []sink.Event{pair{1, "x"}, pair{2, "y"}, pair{3, ""}},
			want: []sink.Event{pair{1, "x"}, pair{2, "y"}, pair{3, ""}}},
		{name: "runs between other codecs", in: []sink.Event{pair{1, "x"}, point{1, 2}, pair{2, "y"}, pair{3, "z"}, "s", 4},
			want: []sink.Event{pair{1, "x"}, point{1, 2}, pair{2, "y"}, pair{3, "z"}, "s", 4}},
		{name: "binary run", in: []sink.Event{point{1, 2}, point{3, 4}, point{5, 6}},
			want: []sink.Event{point{1, 2}, point{3, 4}, point{5, 6}}},
		{name: "a bad binary event in a run", raw: raw([2]string{"point", "\x00\x00\x00\x01\x00\x00\x00\x02"}, [2]string{"point", "\x00"}),
			wantErr: "decoding point: point: want 8 bytes"},
		{name: "null and whitespace", raw: raw([2]string{"pair", "null"}, [2]string{"pair", ` {"a": 5} `}),
			want: []sink.Event{pair{}, pair{A: 5}}},
		{name: "a bad event in a run", raw: raw([2]string{"pair", `{"a":1}`}, [2]string{"pair", `{"a":`}),
			wantErr: "decoding pair"},
		{name: "two events valid only together", raw: raw([2]string{"pair", `{"a":1},{"a":2}`}, [2]string{"pair", `{"a":3}`}),
			wantErr: "decoding pair"},
		{name: "a long run", in: long, want: long},
		{name: "a long run, a bad event in its second half", raw: raw(longRaw...), wantErr: "decoding pair"},
		{name: "an empty event", raw: raw([2]string{"pair", `{"a":1}`}, [2]string{"pair", ``}),
			wantErr: "decoding pair"},
		{name: "one value spread over two events", raw: raw([2]string{"pair", `{"a":`}, [2]string{"pair", `1}`}),
			wantErr: "decoding pair"},
		{name: "two values in one event", raw: raw([2]string{"pair", `{"a":1} {"a":2}`}, [2]string{"pair", `{"a":3}`}),
			wantErr: "decoding pair"},
		{name: "a run of numbers (each ends at its event's end)", in: []sink.Event{1, 22, 333, -4},
			want: []sink.Event{1, 22, 333, -4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.raw
			if tc.in != nil {
				var err error
				if b, err = w.encodeEvents(nil, "S", tc.in); err != nil {
					t.Fatal(err)
				}
			}
			got, err := w.decodeEvents(&reader{b: b})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// blob is encoded by appending (encoding.BinaryAppender): its bytes as
// they are.
type blob struct{ B string }

func (b blob) MarshalBinary() ([]byte, error)          { return b.AppendBinary(nil) }
func (b blob) AppendBinary(dst []byte) ([]byte, error) { return append(dst, b.B...), nil }
func (b *blob) UnmarshalBinary(data []byte) error      { b.B = string(data); return nil }

// TestAppendBinaryCodec: a type with AppendBinary is encoded into the
// message's buffer with its length before it, whatever that length's
// size, and decodes as it would from MarshalBinary.
func TestAppendBinaryCodec(t *testing.T) {
	c := NewCodecs()
	Register[blob](c, "blob")
	w := newWire(&Node{node: "n", inst: "i1"}, c, 0)
	in := []sink.Event{blob{""}, blob{"x"}, blob{strings.Repeat("y", 127)}, blob{strings.Repeat("z", 128)}, blob{strings.Repeat("w", 20000)}}
	b, err := w.encodeEvents([]byte("head"), "S", in)
	if err != nil {
		t.Fatal(err)
	}
	// the same bytes as MarshalBinary's, each length-prefixed, the
	// codec's name before the first only
	want := binary.AppendUvarint([]byte("head"), uint64(len(in)))
	for i, e := range in {
		data, _ := e.(blob).MarshalBinary()
		name := "blob"
		if i > 0 {
			name = ""
		}
		want = appendBytes(appendString(want, name), data)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded %d bytes, want %d as from MarshalBinary", len(b), len(want))
	}
	got, err := w.decodeEvents(&reader{b: b[len("head"):]})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("decoded %d events, not the ones sent", len(got))
	}
}

// TestCodecNameOnce: a message names the codec of an event only when it
// differs from the one before; the long form (every event named) still
// decodes, and an unnamed first event is an error, not a guess.
func TestCodecNameOnce(t *testing.T) {
	c := NewCodecs()
	Register[blob](c, "blob")
	Register[point](c, "point")
	w := newWire(&Node{node: "n", inst: "i1"}, c, 0)
	named := func(items ...string) []byte { // name, data, name, data...
		b := binary.AppendUvarint(nil, uint64(len(items)/2))
		for i := 0; i < len(items); i += 2 {
			b = appendBytes(appendString(b, items[i]), []byte(items[i+1]))
		}
		return b
	}
	data := func(e sink.Event) string { // e's bytes, as its codec writes them
		cd, err := w.codecOf("S", e, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := w.appendEventData(nil, "S", cd, e)
		return string((&reader{b: b}).bytes())
	}
	p12, p34 := data(point{1, 2}), data(point{3, 4})
	tests := []struct {
		name   string
		in     []sink.Event
		bytes  []byte // what encodeEvents writes
		longer []byte // the same events, every one named
	}{
		{name: "one type", in: []sink.Event{blob{"a"}, blob{"b"}, blob{"c"}},
			bytes:  named("blob", "a", "", "b", "", "c"),
			longer: named("blob", "a", "blob", "b", "blob", "c")},
		{name: "types alternate", in: []sink.Event{blob{"a"}, point{1, 2}, point{3, 4}, blob{"b"}},
			bytes:  named("blob", "a", "point", p12, "", p34, "blob", "b"),
			longer: named("blob", "a", "point", p12, "point", p34, "blob", "b")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := w.encodeEvents(nil, "S", tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, tc.bytes) {
				t.Fatalf("encoded %q, want %q", b, tc.bytes)
			}
			for _, enc := range [][]byte{tc.bytes, tc.longer} {
				got, err := w.decodeEvents(&reader{b: enc})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.in) {
					t.Fatalf("decoded %#v, want %#v", got, tc.in)
				}
			}
		})
	}
	if _, err := w.decodeEvents(&reader{b: named("", "a", "blob", "b")}); !errors.Is(err, ErrNoCodec) {
		t.Fatalf("unnamed first event: err %v, want ErrNoCodec", err)
	}
}

// BenchmarkJSONCodec compares, per event, the JSON work of a run of 100
// small events on each side of a remote sink (appendJSON on the sender,
// decodeJSONRun on the replica) with the plain nats.go reference's
// (json.Marshal by the publisher, json.Unmarshal by the subscriber).
//
//	go test ./remote -run xxx -bench JSONCodec -benchmem
func BenchmarkJSONCodec(b *testing.B) {
	type small struct {
		ID   int    `json:"id"`
		Kind string `json:"k"`
	}
	events := make([]any, 100)
	for i := range events {
		events[i] = small{ID: 1<<24 + i, Kind: "x"}
	}
	items := make([][]byte, len(events))
	for i, e := range events {
		items[i], _ = json.Marshal(e)
	}
	perEvent := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
	}
	b.Run("encode/reference", func(b *testing.B) {
		for b.Loop() {
			for _, e := range events {
				_, _ = json.Marshal(e)
			}
		}
		perEvent(b)
	})
	b.Run("encode/remote", func(b *testing.B) {
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			buf = buf[:0]
			for _, e := range events {
				buf, _ = appendLengthPrefixed(buf, func(b []byte) ([]byte, error) { return appendJSON(b, e) })
			}
		}
		perEvent(b)
	})
	b.Run("decode/reference", func(b *testing.B) {
		for b.Loop() {
			for _, d := range items {
				var v small
				_ = json.Unmarshal(d, &v)
			}
		}
		perEvent(b)
	})
	b.Run("decode/remote", func(b *testing.B) {
		es := make([]sink.Event, 0, len(items))
		for b.Loop() {
			var ok bool
			if es, ok = decodeJSONRun[small](items, es[:0]); !ok {
				b.Fatal("the run did not decode")
			}
		}
		perEvent(b)
	})
}

// TestLargeRun: a run is decoded on two goroutines only when it holds
// both many events and many bytes (64 binary events of 5 bytes decode
// faster than another goroutine starts).
func TestLargeRun(t *testing.T) {
	run := func(n, size int) [][]byte {
		r := make([][]byte, n)
		for i := range r {
			r[i] = make([]byte, size)
		}
		return r
	}
	tests := []struct {
		name string
		run  [][]byte
		want bool
	}{
		{name: "64 events of 5 bytes", run: run(64, 5), want: false},
		{name: "64 events of 25 bytes", run: run(64, 25), want: true},
		{name: "780 events of 5 bytes", run: run(780, 5), want: true},
		{name: "few large events", run: run(splitRunAt-1, 4096), want: false},
		{name: "just enough", run: run(splitRunAt, splitRunBytes/splitRunAt), want: true},
		{name: "one byte short", run: append(run(splitRunAt-1, splitRunBytes/splitRunAt), make([]byte, splitRunBytes/splitRunAt-1)), want: false},
	}
	for _, tc := range tests {
		if got := largeRun(tc.run); got != tc.want {
			t.Errorf("%s: largeRun = %v, want %v", tc.name, got, tc.want)
		}
	}
}
