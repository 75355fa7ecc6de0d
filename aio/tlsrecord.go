package aio

import (
	"errors"
	"fmt"
)

// This file reads TLS record framing (RFC 8446 §5.1) without decrypting
// anything: the event loop uses it to hold a new connection until its
// ClientHello has arrived whole, and to wake a waiting handshake only when
// a record that can move it on is complete.

const (
	recordHeaderLen       = 5
	recordTypeCCS         = 20 // change_cipher_spec: never moves a TLS 1.3 handshake on
	recordTypeHandshake   = 22
	recordTypeHeartbeat   = 24            // the highest record type (RFC 6520)
	maxRecordPayload      = 16<<10 + 2048 // TLSCiphertext bound (RFC 8446 §5.2)
	maxPlaintext          = 16 << 10      // a record's plaintext bound (RFC 8446 §5.1)
	handshakeTypeHello    = 1             // client_hello
	maxClientHelloLen     = 64 << 10      // crypto/tls's bound on a handshake message
	maxClientHelloRecords = 8
)

// errNotTLS is what a peer that does not start with a ClientHello gets.
var errNotTLS = errors.New("aio: TLS: not a ClientHello")

// maxClientHelloInput bounds the bytes buffered before a ClientHello is
// whole: the largest ClientHello crypto/tls accepts in the most records
// clientHelloStatus allows.
const maxClientHelloInput = maxClientHelloLen + 4 + maxClientHelloRecords*recordHeaderLen

// clientHelloStatus reports whether buf (the first bytes a peer sent)
// holds a whole ClientHello handshake message. It returns an error
// wrapping errNotTLS as soon as the bytes cannot be one: a record that is
// not a handshake record or not TLS 1.x, an oversized or empty record, a
// first message that is not a ClientHello or is larger than crypto/tls
// accepts, or too many records.
func clientHelloStatus(buf []byte) (whole bool, err error) {
	var msg [4]byte // the handshake message's header: type and length
	payload := 0    // handshake payload bytes seen
	for records := 1; len(buf) >= recordHeaderLen; records++ {
		if records > maxClientHelloRecords {
			return false, fmt.Errorf("%w: ClientHello in more than %d records", errNotTLS, maxClientHelloRecords)
		}
		typ, major := buf[0], buf[1]
		n := int(buf[3])<<8 | int(buf[4])
		switch {
		case typ != recordTypeHandshake:
			return false, fmt.Errorf("%w: record type %d", errNotTLS, typ)
		case major != 3:
			return false, fmt.Errorf("%w: record version %d.%d", errNotTLS, major, buf[2])
		case n == 0 || n > maxRecordPayload:
			return false, fmt.Errorf("%w: record length %d", errNotTLS, n)
		}
		body := buf[recordHeaderLen:]
		avail := min(n, len(body))
		for i := 0; payload+i < len(msg) && i < avail; i++ {
			msg[payload+i] = body[i]
		}
		payload += avail
		if payload < len(msg) {
			if avail < n {
				return false, nil
			}
			buf = buf[recordHeaderLen+n:]
			continue
		}
		size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		switch {
		case msg[0] != handshakeTypeHello:
			return false, fmt.Errorf("%w: handshake message type %d", errNotTLS, msg[0])
		case size > maxClientHelloLen:
			return false, fmt.Errorf("%w: ClientHello of %d bytes", errNotTLS, size)
		case avail < n:
			return false, nil // crypto/tls reads whole records
		case payload >= len(msg)+size:
			return true, nil
		}
		buf = buf[recordHeaderLen+n:]
	}
	return false, nil
}

// recordScanner follows the record framing of a byte stream fed to it in
// pieces and counts the records that can move a handshake on: every whole
// record but a change_cipher_spec, and every header that is not a TLS
// record's (so that the handshake fails on it without waiting for the
// length it claims).
type recordScanner struct {
	header [recordHeaderLen]byte
	have   int // header bytes of the current record seen
	left   int // payload bytes of the current record still to come
	moves  uint64
}

// room is how many of next's bytes (the bytes after those scanned) belong
// to the current record: up to its end when next completes its header,
// all of next while the header is still cut short.
func (r *recordScanner) room(next []byte) int {
	if r.have == recordHeaderLen {
		return min(r.left, len(next)) // inside the payload (have is reset at its end)
	}
	need := recordHeaderLen - r.have
	if len(next) < need {
		return len(next)
	}
	var h [recordHeaderLen]byte
	copy(h[copy(h[:], r.header[:r.have]):], next[:need])
	return min(need+(int(h[3])<<8|int(h[4])), len(next))
}

// scan advances over p.
func (r *recordScanner) scan(p []byte) {
	for len(p) > 0 {
		if r.have < recordHeaderLen {
			k := copy(r.header[r.have:], p)
			r.have += k
			p = p[k:]
			if r.have < recordHeaderLen {
				return
			}
			r.left = int(r.header[3])<<8 | int(r.header[4])
			if typ := r.header[0]; typ < recordTypeCCS || typ > recordTypeHeartbeat || r.header[1] != 3 {
				r.moves++ // not a TLS record: crypto/tls fails on this header at once
			}
		}
		k := min(r.left, len(p))
		r.left -= k
		p = p[k:]
		if r.left == 0 {
			if r.header[0] != recordTypeCCS {
				r.moves++
			}
			r.have = 0
		}
	}
}
