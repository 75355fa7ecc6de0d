package gnutella

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// HeaderLen is the length of a descriptor header (Gnutella 0.4 §2.2).
const HeaderLen = 23

// DefaultMaxPayload bounds a descriptor's payload unless configured
// otherwise. Gnutella 0.4 servents commonly refuse anything above a few
// kilobytes; 64 KiB leaves room for large QueryHits.
const DefaultMaxPayload = 64 << 10

// The handshake of Gnutella 0.4: the connecting side sends Connect, the
// accepting side answers OK; descriptors follow on both sides.
const (
	Connect = "GNUTELLA CONNECT/0.4\n\n"
	OK      = "GNUTELLA OK\n\n"
)

// Errors of the codec; the parsers wrap them with details.
var (
	// ErrMalformed: bytes that are not a well-formed descriptor.
	ErrMalformed = errors.New("gnutella: malformed descriptor")
	// ErrTooLarge: a payload length above the parser's bound.
	ErrTooLarge = errors.New("gnutella: descriptor too large")
	// ErrUnknownType: a payload descriptor not in Gnutella 0.4.
	ErrUnknownType = errors.New("gnutella: unknown descriptor type")
	// ErrHandshake: the peer did not speak the 0.4 handshake.
	ErrHandshake = errors.New("gnutella: bad handshake")
)

// Type is a descriptor's payload descriptor byte.
type Type byte

// The five descriptor types of Gnutella 0.4.
const (
	TypePing     Type = 0x00
	TypePong     Type = 0x01
	TypePush     Type = 0x40
	TypeQuery    Type = 0x80
	TypeQueryHit Type = 0x81
)

func (t Type) String() string {
	switch t {
	case TypePing:
		return "Ping"
	case TypePong:
		return "Pong"
	case TypePush:
		return "Push"
	case TypeQuery:
		return "Query"
	case TypeQueryHit:
		return "QueryHit"
	}
	return fmt.Sprintf("Type(0x%02x)", byte(t))
}

// Known reports whether t is one of the five Gnutella 0.4 types.
func (t Type) Known() bool {
	switch t {
	case TypePing, TypePong, TypePush, TypeQuery, TypeQueryHit:
		return true
	}
	return false
}

// ID is a descriptor ID (or a servent ID): 16 bytes, unique on the network.
type ID [16]byte

func (id ID) String() string { return fmt.Sprintf("%x", id[:]) }

// Header is a descriptor header: 16-byte ID, type, TTL, hops, and the
// payload length (little-endian on the wire).
type Header struct {
	ID     ID
	Type   Type
	TTL    byte
	Hops   byte
	Length uint32
}

// Descriptor is one Gnutella message: a header and its payload.
// Header.Length is len(Payload) when encoded.
type Descriptor struct {
	Header
	Payload []byte
}

// AppendHeader appends the 23-byte encoding of h.
func AppendHeader(b []byte, h Header) []byte {
	b = append(b, h.ID[:]...)
	b = append(b, byte(h.Type), h.TTL, h.Hops)
	return binary.LittleEndian.AppendUint32(b, h.Length)
}

// ParseHeader decodes the first HeaderLen bytes of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: header of %d bytes, want %d", ErrMalformed, len(b), HeaderLen)
	}
	var h Header
	copy(h.ID[:], b[:16])
	h.Type, h.TTL, h.Hops = Type(b[16]), b[17], b[18]
	h.Length = binary.LittleEndian.Uint32(b[19:23])
	return h, nil
}

// AppendTo appends d's encoding (header with Length = len(Payload), then
// the payload) to b.
func (d *Descriptor) AppendTo(b []byte) []byte {
	h := d.Header
	h.Length = uint32(len(d.Payload))
	return append(AppendHeader(b, h), d.Payload...)
}

// Bytes returns d's encoding.
func (d *Descriptor) Bytes() []byte {
	return d.AppendTo(make([]byte, 0, HeaderLen+len(d.Payload)))
}

// Decode decodes one descriptor from the front of b. It returns the
// descriptor (its Payload a copy) and the bytes consumed; n == 0 and a nil
// error mean b does not hold a whole descriptor yet. A payload longer than
// maxPayload (≤ 0: DefaultMaxPayload) is ErrTooLarge as soon as the header
// is read; an unknown type is ErrUnknownType; a payload that is not valid
// for its type is ErrMalformed (see Validate).
func Decode(b []byte, maxPayload int) (d Descriptor, n int, err error) {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	if len(b) < HeaderLen {
		return Descriptor{}, 0, nil
	}
	h, _ := ParseHeader(b)
	if !h.Type.Known() {
		return Descriptor{}, 0, fmt.Errorf("%w 0x%02x", ErrUnknownType, byte(h.Type))
	}
	if uint64(h.Length) > uint64(maxPayload) {
		return Descriptor{}, 0, fmt.Errorf("%w: %s payload of %d bytes (limit %d)", ErrTooLarge, h.Type, h.Length, maxPayload)
	}
	end := HeaderLen + int(h.Length)
	if len(b) < end {
		return Descriptor{}, 0, nil
	}
	d = Descriptor{Header: h, Payload: bytes.Clone(b[HeaderLen:end])}
	if d.Payload == nil {
		d.Payload = []byte{}
	}
	if err := d.Validate(); err != nil {
		return Descriptor{}, 0, err
	}
	return d, end, nil
}

// Validate checks d's payload against its type: a Ping has none, a Pong
// 14 bytes, a Push 26, a Query a speed and a NUL-terminated search string,
// a QueryHit its result set and servent ID.
func (d *Descriptor) Validate() error {
	if int(d.Length) != len(d.Payload) {
		return fmt.Errorf("%w: length %d, payload %d bytes", ErrMalformed, d.Length, len(d.Payload))
	}
	var err error
	switch d.Type {
	case TypePing:
		if len(d.Payload) != 0 {
			err = fmt.Errorf("%w: Ping with a %d-byte payload", ErrMalformed, len(d.Payload))
		}
	case TypePong:
		_, err = ParsePong(d.Payload)
	case TypePush:
		_, err = ParsePush(d.Payload)
	case TypeQuery:
		_, err = ParseQuery(d.Payload)
	case TypeQueryHit:
		_, err = ParseQueryHit(d.Payload)
	default:
		err = fmt.Errorf("%w 0x%02x", ErrUnknownType, byte(d.Type))
	}
	return err
}

// Pong answers a Ping: a host that accepts connections and what it shares.
type Pong struct {
	Port   uint16
	IP     netip.Addr // IPv4
	Files  uint32     // files shared
	KBytes uint32     // kilobytes shared
}

// PongLen is the length of a Pong payload.
const PongLen = 14

// Append appends p's payload encoding.
func (p Pong) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, p.Port)
	b = appendIP(b, p.IP)
	b = binary.LittleEndian.AppendUint32(b, p.Files)
	return binary.LittleEndian.AppendUint32(b, p.KBytes)
}

// Addr is the host's address.
func (p Pong) Addr() netip.AddrPort { return netip.AddrPortFrom(p.IP, p.Port) }

// ParsePong decodes a Pong payload.
func ParsePong(b []byte) (Pong, error) {
	if len(b) != PongLen {
		return Pong{}, fmt.Errorf("%w: Pong payload of %d bytes, want %d", ErrMalformed, len(b), PongLen)
	}
	return Pong{
		Port:   binary.LittleEndian.Uint16(b[0:2]),
		IP:     netip.AddrFrom4([4]byte(b[2:6])),
		Files:  binary.LittleEndian.Uint32(b[6:10]),
		KBytes: binary.LittleEndian.Uint32(b[10:14]),
	}, nil
}

// Query searches the network.
type Query struct {
	MinSpeed uint16 // kB/s
	Search   string // without the terminating NUL
}

// Append appends q's payload encoding.
func (q Query) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, q.MinSpeed)
	b = append(b, q.Search...)
	return append(b, 0)
}

// ParseQuery decodes a Query payload. Bytes after the search string's NUL
// (extensions of later protocol versions) are allowed and ignored.
func ParseQuery(b []byte) (Query, error) {
	if len(b) < 3 {
		return Query{}, fmt.Errorf("%w: Query payload of %d bytes", ErrMalformed, len(b))
	}
	i := bytes.IndexByte(b[2:], 0)
	if i < 0 {
		return Query{}, fmt.Errorf("%w: Query search string not terminated", ErrMalformed)
	}
	return Query{MinSpeed: binary.LittleEndian.Uint16(b[:2]), Search: string(b[2 : 2+i])}, nil
}

// Result is one file in a QueryHit's result set.
type Result struct {
	Index uint32
	Size  uint32
	Name  string
}

// QueryHit answers a Query.
type QueryHit struct {
	Port      uint16
	IP        netip.Addr // IPv4
	Speed     uint32     // kB/s
	Results   []Result
	ServentID ID // the responding servent, the key Push descriptors route by
}

// Append appends h's payload encoding.
func (h QueryHit) Append(b []byte) []byte {
	b = append(b, byte(len(h.Results)))
	b = binary.LittleEndian.AppendUint16(b, h.Port)
	b = appendIP(b, h.IP)
	b = binary.LittleEndian.AppendUint32(b, h.Speed)
	for _, r := range h.Results {
		b = binary.LittleEndian.AppendUint32(b, r.Index)
		b = binary.LittleEndian.AppendUint32(b, r.Size)
		b = append(b, r.Name...)
		b = append(b, 0, 0)
	}
	return append(b, h.ServentID[:]...)
}

// ParseQueryHit decodes a QueryHit payload: the header (hit count, port,
// IP, speed), that many results, each a file index, size and a name
// closed by two NULs, and the 16-byte servent ID last. Bytes between the
// results and the servent ID (the trailer of later versions) are ignored.
func ParseQueryHit(b []byte) (QueryHit, error) {
	const head = 11
	if len(b) < head+16 {
		return QueryHit{}, fmt.Errorf("%w: QueryHit payload of %d bytes", ErrMalformed, len(b))
	}
	h := QueryHit{
		Port:  binary.LittleEndian.Uint16(b[1:3]),
		IP:    netip.AddrFrom4([4]byte(b[3:7])),
		Speed: binary.LittleEndian.Uint32(b[7:11]),
	}
	copy(h.ServentID[:], b[len(b)-16:])
	rest := b[head : len(b)-16]
	n := int(b[0])
	h.Results = make([]Result, 0, min(n, len(rest)/10))
	for i := 0; i < n; i++ {
		if len(rest) < 10 {
			return QueryHit{}, fmt.Errorf("%w: QueryHit result %d of %d truncated", ErrMalformed, i+1, n)
		}
		end := bytes.Index(rest[8:], []byte{0, 0})
		if end < 0 {
			return QueryHit{}, fmt.Errorf("%w: QueryHit result %d name not terminated", ErrMalformed, i+1)
		}
		h.Results = append(h.Results, Result{
			Index: binary.LittleEndian.Uint32(rest[0:4]),
			Size:  binary.LittleEndian.Uint32(rest[4:8]),
			Name:  string(rest[8 : 8+end]),
		})
		rest = rest[8+end+2:]
	}
	return h, nil
}

// Push asks a firewalled servent to connect out and send a file.
type Push struct {
	ServentID ID
	Index     uint32
	IP        netip.Addr // IPv4 of the requester
	Port      uint16
}

// PushLen is the length of a Push payload.
const PushLen = 26

// Append appends p's payload encoding.
func (p Push) Append(b []byte) []byte {
	b = append(b, p.ServentID[:]...)
	b = binary.LittleEndian.AppendUint32(b, p.Index)
	b = appendIP(b, p.IP)
	return binary.LittleEndian.AppendUint16(b, p.Port)
}

// ParsePush decodes a Push payload.
func ParsePush(b []byte) (Push, error) {
	if len(b) != PushLen {
		return Push{}, fmt.Errorf("%w: Push payload of %d bytes, want %d", ErrMalformed, len(b), PushLen)
	}
	var p Push
	copy(p.ServentID[:], b[:16])
	p.Index = binary.LittleEndian.Uint32(b[16:20])
	p.IP = netip.AddrFrom4([4]byte(b[20:24]))
	p.Port = binary.LittleEndian.Uint16(b[24:26])
	return p, nil
}

func appendIP(b []byte, ip netip.Addr) []byte {
	if ip.Is4() || ip.Is4In6() {
		a := ip.Unmap().As4()
		return append(b, a[:]...)
	}
	return append(b, 0, 0, 0, 0)
}

// Parser splits a connection's byte stream into descriptors. It holds at
// most one partial descriptor (bounded by its MaxPayload), so a peer
// cannot make it grow without bound. A Parser is not safe for concurrent
// use.
type Parser struct {
	// MaxPayload bounds a payload (0 → DefaultMaxPayload).
	MaxPayload int
	buf        []byte
	err        error
}

// Feed appends the descriptors completed by data to out. After an error
// (ErrTooLarge, ErrUnknownType, ErrMalformed) the stream cannot be
// resynchronised: every later call returns the same error. Descriptors
// decoded before the error are still appended.
func (p *Parser) Feed(data []byte, out []Descriptor) ([]Descriptor, error) {
	if p.err != nil {
		return out, p.err
	}
	b := data
	if len(p.buf) > 0 {
		p.buf = append(p.buf, data...)
		b = p.buf
	}
	for {
		d, n, err := Decode(b, p.MaxPayload)
		if err != nil {
			p.err, p.buf = err, nil
			return out, err
		}
		if n == 0 {
			break
		}
		out = append(out, d)
		b = b[n:]
	}
	// Keep the partial descriptor (bounded: header + MaxPayload).
	if len(b) == 0 {
		p.buf = p.buf[:0]
	} else {
		p.buf = append(p.buf[:0:0], b...)
	}
	return out, nil
}

// Buffered is the number of bytes of a partial descriptor held.
func (p *Parser) Buffered() int { return len(p.buf) }

// Handshake reads a handshake line (ending in "\n\n") from the front of
// b. It returns the bytes consumed, 0 while the line is incomplete, or
// ErrHandshake if the bytes cannot be want (or exceed its length without
// matching).
func Handshake(b []byte, want string) (int, error) {
	n := min(len(b), len(want))
	if string(b[:n]) != want[:n] {
		return 0, fmt.Errorf("%w: got %q, want %q", ErrHandshake, b[:n], want)
	}
	if n < len(want) {
		return 0, nil
	}
	return len(want), nil
}
