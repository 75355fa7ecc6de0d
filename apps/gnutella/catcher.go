package gnutella

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// catcherArgs are GnutellaCatcher's args.
type catcherArgs struct {
	// Hosts are the well-known hosts to join the network through.
	Hosts []string `yaml:"hosts"`
	// Connections is how many outgoing connections to keep open (default 4).
	Connections int `yaml:"connections"`
	// Interval is how often to check the connections (default 1s).
	Interval time.Duration `yaml:"interval"`
	// PingEvery is how often to Ping the network to learn hosts (default
	// 10s; the Pongs' hosts go into the host cache).
	PingEvery time.Duration `yaml:"pingEvery"`
	// MaxHosts bounds the host cache (default 1000).
	MaxHosts int `yaml:"maxHosts"`
	// Socket names the socket configuration of outgoing connections
	// (default "gnutella").
	Socket string `yaml:"socket"`
	// Server and Router name the stages connections and Pings go to.
	Server string `yaml:"server"`
	Router string `yaml:"router"`
}

type catcherTick struct{}

// catcher is the GnutellaCatcher stage: it keeps a cache of hosts (the
// configured ones and those learnt from Pongs) and, every interval, opens
// connections to them until the node has the configured number of
// outgoing peers. Connections are handed to GnutellaServer, which runs
// the handshake. It runs on one goroutine.
type catcher struct {
	node    *Node
	log     *slog.Logger
	args    catcherArgs
	m       *stage.Manager
	self    sink.Sink
	reply   sink.Sink // self, as a stage's sink the router can trace its replies on
	server  sink.Sink
	router  sink.Sink
	client  *aio.Client
	hosts   []string                   // most recently learnt last
	known   map[string]bool            // hosts in the cache
	seeds   map[string]bool            // configured hosts, never forgotten
	pending map[string]bool            // connects under way
	handed  map[string]*aio.Connection // connected, handshake under way in GnutellaServer
	ownAddr string
	pinged  time.Time
	unsub   func()

	mu      sync.Mutex // the timer is also stopped from Node.Shutdown
	timer   *stage.Timer
	stopped bool // shutting down: no more ticks
}

func (*catcher) SingleThreaded() {}

func (c *catcher) Init(ctx *stage.Context) error {
	c.log = c.node.logger(ctx)
	c.m = ctx.Manager()
	c.args = catcherArgs{Connections: 4, Interval: time.Second, PingEvery: 10 * time.Second, MaxHosts: 1000,
		Socket: "gnutella", Server: StageServer, Router: StageRouter}
	if err := ctx.DecodeArgs(&c.args); err != nil {
		return err
	}
	a := &c.args
	if a.Connections < 0 || a.Interval <= 0 || a.PingEvery <= 0 || a.MaxHosts < 1 {
		return fmt.Errorf("gnutella: GnutellaCatcher: connections must not be negative; interval, pingEvery and maxHosts must be positive")
	}
	var err error
	if c.server, err = ctx.Sink(a.Server); err != nil {
		return err
	}
	if c.router, err = ctx.Sink(a.Router); err != nil {
		return err
	}
	c.self = ctx.Stage().Sink()
	if c.reply, err = ctx.Sink(ctx.Stage().Name()); err != nil {
		return err
	}
	c.known, c.pending, c.seeds = make(map[string]bool), make(map[string]bool), make(map[string]bool)
	c.handed = make(map[string]*aio.Connection)
	for _, h := range append(append([]string(nil), a.Hosts...), c.node.opts.Hosts...) {
		c.seeds[c.learn(h)] = true
	}
	acfg, err := aio.ConfigOf(c.m)
	if err != nil {
		return err
	}
	sock, _ := acfg.Socket(a.Socket)
	sock.Name = a.Socket + "-out"
	if c.client, err = aio.NewClient(sock, aio.Env{Manager: c.m, Logger: c.log}); err != nil {
		return err
	}
	if err := c.node.setClient(c.client); err != nil {
		_ = c.client.Close()
		return err
	}
	c.unsub = c.m.Subscribe(stage.SignalShutdownStarted, c.self)
	ctx.Profile("gnutella.hosts", func() float64 { return float64(c.node.stats.hosts.Load()) })
	c.node.setStopCatcher(c.stop)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer, err = c.m.After(0, c.self, catcherTick{})
	return err
}

// stop ends the ticks (shutdown).
func (c *catcher) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

func (c *catcher) Destroy() error {
	if c.unsub != nil {
		c.unsub()
	}
	c.stop()
	return c.client.Close()
}

func (c *catcher) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch v := e.(type) {
		case catcherTick:
			c.tick()
		case stage.ShutdownStarted:
			c.stop()
		case HostSeen:
			c.learn(v.Addr.String())
		case Arrival: // a Pong answering our own Ping
			if p, err := ParsePong(v.D.Payload); err == nil && p.Port != 0 {
				c.learn(p.Addr().String())
			}
		case *aio.Connection:
			o, _ := v.Value().(outgoingConn)
			delete(c.pending, o.addr)
			c.node.stats.connects.Add(1)
			if err := c.server.Enqueue(v); err != nil {
				c.log.Warn("gnutella: GnutellaServer refused an outgoing connection", "addr", o.addr, "err", err)
				_ = v.Abort()
			} else {
				c.handed[o.addr] = v
			}
		case aio.ConnectFailed:
			o, _ := v.Value.(outgoingConn)
			delete(c.pending, o.addr)
			c.forget(o.addr)
			c.log.Debug("gnutella: connect failed", "addr", o.addr, "err", v.Err)
		case aio.SinkClosed, aio.SinkClogged:
			// An outgoing connection that closed before GnutellaServer
			// started reading it.
		default:
			c.log.Warn("gnutella: GnutellaCatcher: unexpected event", "type", fmt.Sprintf("%T", e))
		}
	}
	return nil
}

func (c *catcher) tick() {
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		return
	}
	if c.ownAddr == "" {
		if a := c.node.Addr(); a != nil {
			c.ownAddr = a.String()
		}
	}
	open := c.node.outgoing()
	busy := len(open) + len(c.pending)
	for h, conn := range c.handed {
		switch {
		case open[h] || conn.Stats().Closed:
			delete(c.handed, h) // handshake done (counted in open) or failed
		default:
			busy++
		}
	}
	need := c.args.Connections - busy
	for i := len(c.hosts) - 1; i >= 0 && need > 0; i-- {
		h := c.hosts[i]
		if open[h] || c.pending[h] || c.handed[h] != nil || h == c.ownAddr {
			continue
		}
		if err := c.client.Connect(h, c.self, outgoingConn{addr: h}); err != nil {
			c.log.Warn("gnutella: connect", "addr", h, "err", err)
			continue
		}
		c.pending[h] = true
		need--
	}
	now := time.Now()
	if len(open) > 0 && now.Sub(c.pinged) >= c.args.PingEvery {
		c.pinged = now
		var d Descriptor
		_, _ = rand.Read(d.ID[:])
		d.Type, d.TTL, d.Payload = TypePing, 3, []byte{}
		c.router.EnqueueLossy(Originate{D: d, Reply: c.reply})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	var err error
	if c.timer, err = c.m.After(c.args.Interval, c.self, catcherTick{}); err != nil {
		c.log.Debug("gnutella: catcher stops", "err", err)
	}
}

// learn adds a host to the cache, dropping the oldest past MaxHosts.
func (c *catcher) learn(h string) string {
	if ap, err := netip.ParseAddrPort(h); err == nil {
		h = ap.String()
	}
	if c.known[h] {
		return h
	}
	c.known[h] = true
	c.hosts = append(c.hosts, h)
	c.node.stats.hosts.Add(1)
	if len(c.hosts) > c.args.MaxHosts {
		delete(c.known, c.hosts[0])
		c.hosts = c.hosts[1:]
	}
	return h
}

func (c *catcher) forget(h string) {
	if !c.known[h] || c.seeds[h] {
		return
	}
	delete(c.known, h)
	for i, x := range c.hosts {
		if x == h {
			c.hosts = append(c.hosts[:i], c.hosts[i+1:]...)
			break
		}
	}
}
