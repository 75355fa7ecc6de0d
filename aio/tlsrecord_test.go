package aio

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
)

// clientHello returns the first flight of a real crypto/tls client.
func clientHello(t testing.TB) []byte {
	t.Helper()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	var hello []byte
	tr := newTLSTransport(addr, addr, func(b []byte) error {
		hello = append(hello, b...)
		return nil
	})
	tr.FeedEOF() // the client's Handshake returns after sending its hello
	_ = tls.Client(tr, &tls.Config{ServerName: "localhost"}).Handshake()
	if len(hello) == 0 {
		t.Fatal("no ClientHello captured")
	}
	return hello
}

func TestClientHelloStatus(t *testing.T) {
	hello := clientHello(t)
	// The same ClientHello re-framed in records of 7 bytes.
	var split []byte
	body := hello[recordHeaderLen:]
	for i := 0; i < len(body); i += 7 {
		part := body[i:min(i+7, len(body))]
		split = append(split, recordTypeHandshake, 3, 1, 0, byte(len(part)))
		split = append(split, part...)
	}
	for _, tc := range []struct {
		name  string
		in    []byte
		whole bool
		bad   bool
	}{
		{"nothing", nil, false, false},
		{"four header bytes", hello[:4], false, false},
		{"header and part of the body", hello[:len(hello)-1], false, false},
		{"whole", hello, true, false},
		{"whole and more", append(append([]byte(nil), hello...), 0x14, 3, 3, 0, 1, 1), true, false},
		{"in too many records", split, false, true},
		{"plain HTTP", []byte("GET / HTTP/1.1\r\n"), false, true},
		{"change_cipher_spec first", []byte{recordTypeCCS, 3, 3, 0, 1, 1}, false, true},
		{"not a ClientHello", []byte{recordTypeHandshake, 3, 3, 0, 4, 2, 0, 0, 0}, false, true},
		{"empty ClientHello", []byte{recordTypeHandshake, 3, 1, 0, 4, 1, 0, 0, 0}, true, false},
	} {
		whole, err := clientHelloStatus(tc.in)
		if whole != tc.whole || (err != nil) != tc.bad {
			t.Errorf("%s: whole %v, err %v; want whole %v, error %v", tc.name, whole, err, tc.whole, tc.bad)
		}
		if err != nil && !errors.Is(err, errNotTLS) {
			t.Errorf("%s: %v does not wrap errNotTLS", tc.name, err)
		}
	}
}

// FuzzClientHelloStatus checks that the status only moves forward as
// bytes arrive (a prefix's "whole" or error stays), and that the record
// scanner counts the same records however the bytes are cut.
func FuzzClientHelloStatus(f *testing.F) {
	f.Add(clientHello(f), 3)
	f.Add([]byte{recordTypeHandshake, 3, 1, 0, 4, 1, 0, 0, 0, recordTypeCCS, 3, 3, 0, 1, 1}, 1)
	f.Add([]byte("GET / HTTP/1.1\r\n"), 5)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		if cut < 0 {
			cut = -cut
		}
		cut %= len(in) + 1
		pw, perr := clientHelloStatus(in[:cut])
		w, err := clientHelloStatus(in)
		if perr != nil && err == nil || pw && !w {
			t.Fatalf("prefix %d: whole %v err %v; all: whole %v err %v", cut, pw, perr, w, err)
		}
		var one, two recordScanner
		one.scan(in)
		two.scan(in[:cut])
		two.scan(in[cut:])
		if one.moves != two.moves {
			t.Fatalf("records counted: %d at once, %d in two pieces", one.moves, two.moves)
		}
	})
}
