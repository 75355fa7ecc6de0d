package gnutella_test

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
)

func BenchmarkDecode(b *testing.B) {
	d := query(newID(), 7, "seda thesis")
	wire := d.Bytes()
	b.ReportAllocs()
	b.SetBytes(int64(len(wire)))
	for i := 0; i < b.N; i++ {
		if _, _, err := gnutella.Decode(wire, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRouter measures descriptors routed per second: four peers on
// loopback each send Pings in rounds of 256 and wait until every other
// peer has received the round's forwards (3 per Ping), so neither router
// is overrun. "sandstorm" is the stage graph (one routing thread, each
// Ping answered with a Pong); "net" is the same routing with a goroutine per connection on
// package net, the reference, in the same run.
//
//	go test -run XXX -bench Router -benchtime 40000x -count 3 ./gnutella/
func BenchmarkRouter(b *testing.B) {
	b.Run("sandstorm", func(b *testing.B) {
		r := startRouter(b, "", "")
		benchRouter(b, r.addr)
	})
	b.Run("net", func(b *testing.B) {
		addr, stop := netRouter(b)
		defer stop()
		benchRouter(b, addr)
	})
}

func benchRouter(b *testing.B, addr string) {
	const peers, round = 4, 256
	type bp struct {
		c net.Conn
		r *bufio.Reader
	}
	ps := make([]bp, peers)
	for i := range ps {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, gnutella.Connect)
		r := bufio.NewReaderSize(c, 64<<10)
		ok := make([]byte, len(gnutella.OK))
		if _, err := io.ReadFull(r, ok); err != nil {
			b.Fatal(err)
		}
		ps[i] = bp{c, r}
	}
	time.Sleep(50 * time.Millisecond) // every peer listed
	rounds := max(1, b.N/(peers*round))
	b.ResetTimer()
	var seq uint64
	for k := 0; k < rounds; k++ {
		var wg sync.WaitGroup
		for i := range ps {
			buf := make([]byte, 0, round*gnutella.HeaderLen)
			for j := 0; j < round; j++ {
				seq++
				var id gnutella.ID
				for x := 0; x < 8; x++ {
					id[x] = byte(seq >> (8 * x))
				}
				id[8] = 0xbe
				buf = (&gnutella.Descriptor{Header: gnutella.Header{ID: id, Type: gnutella.TypePing, TTL: 2}}).AppendTo(buf)
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := ps[i].c.Write(buf); err != nil {
					b.Error(err)
				}
			}()
			go func() {
				defer wg.Done()
				// Forwards of the other peers' Pings (3 × round), Pongs skipped.
				got := 0
				hdr := make([]byte, gnutella.HeaderLen)
				for got < (peers-1)*round {
					if _, err := io.ReadFull(ps[i].r, hdr); err != nil {
						b.Error(err)
						return
					}
					h, _ := gnutella.ParseHeader(hdr)
					if _, err := ps[i].r.Discard(int(h.Length)); err != nil {
						b.Error(err)
						return
					}
					if h.Type == gnutella.TypePing {
						got++
					}
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	b.ReportMetric(float64(rounds*peers*round)/b.Elapsed().Seconds(), "descriptors/s")
	b.ReportMetric(0, "ns/op")
}

// netRouter is the reference: the same routing (duplicates dropped, Pings
// answered with a Pong and broadcast to every other peer with TTL−1) with a goroutine per
// connection reading it and blocking writes under a lock per peer.
func netRouter(b *testing.B) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	type conn struct {
		mu sync.Mutex
		c  net.Conn
	}
	var mu sync.Mutex
	peers := map[*conn]bool{}
	seen := map[gnutella.ID]bool{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReaderSize(c, 16<<10)
				hs := make([]byte, len(gnutella.Connect))
				if _, err := io.ReadFull(r, hs); err != nil || string(hs) != gnutella.Connect {
					return
				}
				self := &conn{c: c}
				io.WriteString(c, gnutella.OK)
				mu.Lock()
				peers[self] = true
				mu.Unlock()
				defer func() {
					mu.Lock()
					delete(peers, self)
					mu.Unlock()
				}()
				var p gnutella.Parser
				var out []gnutella.Descriptor
				buf := make([]byte, 16<<10)
				for {
					n, err := r.Read(buf)
					if err != nil {
						return
					}
					if out, err = p.Feed(buf[:n], out[:0]); err != nil {
						b.Log("reference router:", err)
						return
					}
					for _, d := range out {
						mu.Lock()
						dup := seen[d.ID]
						if !dup {
							if len(seen) > 1<<20 {
								clear(seen)
							}
							seen[d.ID] = true
						}
						var to []*conn
						for q := range peers {
							if q != self {
								to = append(to, q)
							}
						}
						mu.Unlock()
						if dup {
							continue
						}
						if d.Type == gnutella.TypePing { // answered, like the stage router
							pong := gnutella.Descriptor{Header: gnutella.Header{ID: d.ID, Type: gnutella.TypePong, TTL: d.Hops + 1},
								Payload: gnutella.Pong{Port: 1}.Append(nil)}
							self.mu.Lock()
							c.Write(pong.Bytes())
							self.mu.Unlock()
						}
						if d.TTL <= 1 {
							continue
						}
						d.TTL--
						d.Hops++
						wire := d.Bytes()
						for _, q := range to {
							q.mu.Lock()
							q.c.Write(wire)
							q.mu.Unlock()
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		for q := range peers {
			q.c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}
