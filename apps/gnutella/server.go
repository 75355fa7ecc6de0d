package gnutella

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Arrival is a descriptor received from a peer, on its way from
// GnutellaServer to GnutellaRouter.
type Arrival struct {
	From *Peer
	D    Descriptor
	At   time.Time // when GnutellaServer parsed it
}

// outgoingConn marks a connection the Catcher opened (its Value until
// GnutellaServer takes it over).
type outgoingConn struct{ addr string }

// serverArgs are GnutellaServer's args.
type serverArgs struct {
	// Socket names the socket in `global.aio.sockets` (default "gnutella").
	Socket string `yaml:"socket"`
	// Addr overrides the socket's address.
	Addr string `yaml:"addr"`
	// MaxPayload bounds a descriptor's payload (default 64 KiB); a peer
	// that sends a larger one is closed.
	MaxPayload int `yaml:"maxPayload"`
	// MaxPeers bounds the connected peers (default 1000); a connection
	// past it is closed at its handshake, before the OK (Gnutella 0.4 has
	// no refusal message), and counted in Stats.Rejected.
	MaxPeers int `yaml:"maxPeers"`
	// Router names the routing stage (default GnutellaRouter).
	Router string `yaml:"router"`
}

// server is the GnutellaServer stage: it opens the socket, accepts
// connections (and takes over the Catcher's outgoing ones), runs the
// handshake and parses descriptors into Arrival events for the router.
// It runs on one goroutine: a connection's packets must be parsed in
// order, and parsing is cheap.
type server struct {
	node   *Node
	log    *slog.Logger
	args   serverArgs
	self   sink.Sink
	router sink.Sink
	batch  []Descriptor
}

func (*server) SingleThreaded() {}

func (s *server) Init(c *stage.Context) error {
	n := s.node
	s.log = n.logger(c)
	s.args = serverArgs{Socket: "gnutella", Router: StageRouter, MaxPayload: DefaultMaxPayload, MaxPeers: 1000}
	if err := c.DecodeArgs(&s.args); err != nil {
		return err
	}
	if s.args.MaxPayload <= 0 || s.args.MaxPeers <= 0 {
		return fmt.Errorf("gnutella: GnutellaServer: maxPayload and maxPeers must be positive")
	}
	var err error
	if s.router, err = c.Sink(s.args.Router); err != nil {
		return fmt.Errorf("gnutella: GnutellaServer router stage: %w", err)
	}
	s.self = c.Stage().Sink()
	acfg, err := aio.ConfigOf(c.Manager())
	if err != nil {
		return err
	}
	sock, _ := acfg.Socket(s.args.Socket)
	switch {
	case n.opts.Addr != "":
		sock.Addr = n.opts.Addr
	case s.args.Addr != "":
		sock.Addr = s.args.Addr
	case sock.Addr == "":
		sock.Addr = DefaultAddr
	}
	sock.Name = s.args.Socket
	srv, err := aio.Listen(sock, s.self, aio.Env{Manager: c.Manager(), Logger: s.log})
	if err != nil {
		return err
	}
	if err := n.setServer(srv); err != nil {
		_ = srv.Close()
		return err
	}
	n.profile(c)
	s.log.Info("gnutella: listening", "addr", srv.Addr().String())
	return nil
}

func (s *server) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch v := e.(type) {
		case *aio.Connection:
			s.open(v)
		case aio.Packet:
			s.packet(v)
		case aio.SinkClosed:
			s.closed(v)
		case aio.SinkClogged:
			// A slow peer: its write was refused (counted by the router);
			// under clogPolicy close aio closes it next.
		case aio.ListenSucceeded, aio.ServerClosed:
		default:
			s.log.Warn("gnutella: GnutellaServer: unexpected event", "type", fmt.Sprintf("%T", e))
		}
	}
	return nil
}

func (s *server) open(c *aio.Connection) {
	p := &Peer{conn: c, parser: Parser{MaxPayload: s.args.MaxPayload}}
	if o, ok := c.Value().(outgoingConn); ok {
		p.outgoing, p.addr = true, o.addr
	}
	c.SetValue(p)
	if err := c.StartReader(s.self); err != nil {
		s.log.Warn("gnutella: cannot read connection", "conn", c.String(), "err", err)
		_ = c.Abort()
		return
	}
	if p.outgoing {
		if err := c.Enqueue([]byte(Connect)); err != nil {
			_ = c.Abort()
		}
	}
}

func (s *server) packet(pk aio.Packet) {
	p, ok := pk.Conn.Value().(*Peer)
	if !ok || p.closed.Load() {
		return
	}
	data := pk.Data
	if !p.handshook {
		want := Connect
		if p.outgoing {
			want = OK
		}
		p.hs = append(p.hs, data...)
		n, err := Handshake(p.hs, want)
		if err != nil {
			s.bad(p, err)
			return
		}
		if n == 0 {
			return
		}
		data, p.hs = p.hs[n:], nil
		if len(s.node.Peers()) >= s.args.MaxPeers {
			s.node.stats.rejected.Add(1)
			p.closed.Store(true)
			_ = p.conn.Abort()
			return
		}
		if !p.outgoing {
			if err := p.conn.Enqueue([]byte(OK)); err != nil {
				s.bad(p, err)
				return
			}
		}
		p.handshook = true
		s.node.stats.handshakes.Add(1)
		s.node.addPeer(p)
		s.log.Debug("gnutella: peer connected", "peer", p.String(), "outgoing", p.outgoing)
	}
	var err error
	s.batch, err = p.parser.Feed(data, s.batch[:0])
	now := time.Now()
	for i := range s.batch {
		s.node.stats.received.Add(1)
		if e := s.router.Enqueue(Arrival{From: p, D: s.batch[i], At: now}); e != nil {
			// Gnutella is lossy: a router that refuses (its queue
			// threshold, its admission predicate) drops the descriptor.
			s.node.stats.dropped.Add(1)
		}
		s.batch[i] = Descriptor{}
	}
	if err != nil {
		s.bad(p, err)
	}
}

// bad closes a peer that broke the protocol.
func (s *server) bad(p *Peer, err error) {
	s.node.stats.badPeers.Add(1)
	s.log.Info("gnutella: closing peer", "peer", p.String(), "err", err)
	s.gone(p)
	_ = p.conn.Abort()
}

func (s *server) gone(p *Peer) {
	if p.closed.CompareAndSwap(false, true) && p.handshook {
		s.node.removePeer(p)
	}
}

func (s *server) closed(ev aio.SinkClosed) {
	p, ok := ev.Conn.Value().(*Peer)
	if !ok {
		return
	}
	if ev.Reason == aio.ClosedClogged || errors.Is(ev.Err, aio.ErrClogged) {
		s.node.stats.slowClosed.Add(1)
		s.log.Info("gnutella: closed a slow peer", "peer", p.String(), "unsent", ev.Unsent)
	}
	s.gone(p)
}
