package gnutella_test

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
	"github.com/sandstorm-go/sandstorm/stage"
)

func ExampleDecode() {
	q := gnutella.Descriptor{
		Header:  gnutella.Header{ID: gnutella.ID{1, 2, 3}, Type: gnutella.TypeQuery, TTL: 7},
		Payload: gnutella.Query{MinSpeed: 0, Search: "seda"}.Append(nil),
	}
	wire := q.Bytes()
	d, n, err := gnutella.Decode(wire, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	query, _ := gnutella.ParseQuery(d.Payload)
	fmt.Println(n, d.Type, d.TTL, d.Length, query.Search)

	// A payload longer than the bound is refused at its header.
	big := gnutella.AppendHeader(nil, gnutella.Header{Type: gnutella.TypeQuery, Length: 1 << 20})
	_, _, err = gnutella.Decode(big, 4096)
	fmt.Println(err)
	// Output:
	// 30 Query 7 7 seda
	// gnutella: descriptor too large: Query payload of 1048576 bytes (limit 4096)
}

// A router from a stage configuration, and a peer's handshake with it.
func ExampleNode() {
	node := gnutella.New(gnutella.Options{Addr: "127.0.0.1:0"})
	reg := stage.NewRegistry()
	node.Register(reg)
	m, err := stage.Parse([]byte(`
stages:
  GnutellaServer: {handler: gnutella.Server}
  GnutellaRouter: {handler: gnutella.Router, args: {queryDelay: 20ms}}
`), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	defer m.Shutdown(context.Background())
	defer node.Shutdown(context.Background())

	c, _ := net.Dial("tcp", node.Addr().String())
	defer c.Close()
	io.WriteString(c, gnutella.Connect)
	ok := make([]byte, len(gnutella.OK))
	io.ReadFull(c, ok)
	fmt.Printf("%q\n", ok)
	// Output: "GNUTELLA OK\n\n"
}
