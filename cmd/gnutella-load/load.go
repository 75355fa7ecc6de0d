package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
)

// loadConfig describes one run of simulated peers.
type loadConfig struct {
	Addr     string
	Peers    int           // simulated peers, each its own connection
	Rate     float64       // descriptors per second, all peers together
	Duration time.Duration // how long to send
	Queries  float64       // fraction of Queries (the rest are Pings): thesis 0.15
	TTL      byte          // TTL of what the peers send (2: the router forwards once)
	Drain    time.Duration // after sending stops, wait at most this long for the descriptors in flight
	Seed     uint64
}

// result is what a run measured. Latency is from the moment a peer wrote
// a descriptor to the moment another peer read the router's forward of
// it (every forward is a sample: peers-1 per descriptor).
type result struct {
	Rate          float64
	Sent          [2]int // Pings, Queries
	Received      [2]int // forwards received
	Expected      [2]int // Sent × (peers-1)
	MeanMS, P90MS [2]float64
	Elapsed       time.Duration
}

const (
	iPing  = 0
	iQuery = 1
)

// magic marks the IDs the generator made: 8 bytes of send time, "SEDA",
// the peer and a sequence number.
var magic = [4]byte{'S', 'E', 'D', 'A'}

type samples struct {
	mu  sync.Mutex
	lat [2][]float64 // milliseconds
}

func (s *samples) add(i int, ms float64) {
	s.mu.Lock()
	s.lat[i] = append(s.lat[i], ms)
	s.mu.Unlock()
}

func (s *samples) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lat[0]) + len(s.lat[1])
}

// dialPeer connects and runs the 0.4 handshake.
func dialPeer(addr string) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, gnutella.Connect); err != nil {
		c.Close()
		return nil, nil, err
	}
	r := bufio.NewReaderSize(c, 64<<10)
	ok := make([]byte, len(gnutella.OK))
	if _, err := io.ReadFull(r, ok); err != nil || string(ok) != gnutella.OK {
		c.Close()
		return nil, nil, fmt.Errorf("handshake with %s: %q %v", addr, ok, err)
	}
	c.SetDeadline(time.Time{})
	return c, r, nil
}

// runLoad connects cfg.Peers simulated peers to the router and sends
// cfg.Rate descriptors per second among them, open loop (a peer sends on
// schedule whether or not the router keeps up), for cfg.Duration.
// ready, if set, is called once every peer is connected.
func runLoad(ctx context.Context, cfg loadConfig) (result, error) {
	if cfg.Peers < 2 {
		return result{}, fmt.Errorf("need at least 2 peers")
	}
	conns := make([]net.Conn, cfg.Peers)
	readers := make([]*bufio.Reader, cfg.Peers)
	for i := range conns {
		c, r, err := dialPeer(cfg.Addr)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return result{}, err
		}
		conns[i], readers[i] = c, r
	}
	// Let the router list every peer before the first descriptor: its
	// OK is queued before the peer is listed.
	time.Sleep(100 * time.Millisecond)

	var s samples
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			read(readers[i], &s)
		}()
	}
	res := result{Rate: cfg.Rate}
	var sent [2]int
	var smu sync.Mutex
	start := time.Now()
	var swg sync.WaitGroup
	per := cfg.Rate / float64(cfg.Peers)
	for i := range conns {
		swg.Add(1)
		go func() {
			defer swg.Done()
			n := send(ctx, conns[i], i, per, start, cfg)
			smu.Lock()
			sent[0] += n[0]
			sent[1] += n[1]
			smu.Unlock()
		}()
	}
	swg.Wait()
	res.Sent = sent
	for k := range res.Expected {
		res.Expected[k] = sent[k] * (cfg.Peers - 1)
	}
	// Wait for what is in flight: until everything expected arrived, the
	// drain bound passed, or nothing arrived for two seconds.
	want := res.Expected[0] + res.Expected[1]
	last, lastAt := -1, time.Now()
	bound := time.Now().Add(cfg.Drain)
	for {
		n := s.count()
		if n >= want || time.Now().After(bound) || ctx.Err() != nil {
			break
		}
		if n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > 2*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Elapsed = time.Since(start)
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	for k := range s.lat {
		l := s.lat[k]
		res.Received[k] = len(l)
		if len(l) == 0 {
			continue
		}
		sum := 0.0
		for _, v := range l {
			sum += v
		}
		res.MeanMS[k] = sum / float64(len(l))
		slices.Sort(l)
		res.P90MS[k] = l[len(l)*9/10]
	}
	return res, nil
}

// send writes this peer's share of the load on schedule until the
// duration ends.
func send(ctx context.Context, c net.Conn, peer int, rate float64, start time.Time, cfg loadConfig) (n [2]int) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(peer)))
	interval := time.Duration(float64(time.Second) / rate)
	var seq uint32
	buf := make([]byte, 0, 256)
	for k := 0; ; k++ {
		due := start.Add(time.Duration(k) * interval)
		if due.Sub(start) >= cfg.Duration || ctx.Err() != nil {
			return n
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		seq++
		var d gnutella.Descriptor
		binary.LittleEndian.PutUint64(d.ID[0:8], uint64(time.Now().UnixNano()))
		copy(d.ID[8:12], magic[:])
		d.ID[12] = byte(peer)
		d.ID[13], d.ID[14], d.ID[15] = byte(seq), byte(seq>>8), byte(seq>>16)
		d.TTL = cfg.TTL
		i := iPing
		if rng.Float64() < cfg.Queries {
			i = iQuery
			d.Type = gnutella.TypeQuery
			d.Payload = gnutella.Query{Search: words[rng.IntN(len(words))]}.Append(nil)
		} else {
			d.Type, d.Payload = gnutella.TypePing, []byte{}
		}
		buf = d.AppendTo(buf[:0])
		if _, err := c.Write(buf); err != nil {
			return n
		}
		n[i]++
	}
}

var words = []string{"seda", "thesis", "sandstorm", "haboob", "gnutella", "mp3", "linux iso", "welsh"}

// read parses what the router sends this peer and records the latency of
// every forwarded Ping and Query the generator made.
func read(r *bufio.Reader, s *samples) {
	var p gnutella.Parser
	var out []gnutella.Descriptor
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			now := time.Now()
			var perr error
			out, perr = p.Feed(buf[:n], out[:0])
			for _, d := range out {
				if [4]byte(d.ID[8:12]) != magic {
					continue
				}
				sentAt := time.Unix(0, int64(binary.LittleEndian.Uint64(d.ID[0:8])))
				ms := float64(now.Sub(sentAt)) / float64(time.Millisecond)
				switch d.Type {
				case gnutella.TypePing:
					s.add(iPing, ms)
				case gnutella.TypeQuery:
					s.add(iQuery, ms)
				}
			}
			if perr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
