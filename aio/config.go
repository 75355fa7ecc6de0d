package aio

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	metrics "github.com/rcrowley/go-metrics"
	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("aio: invalid configuration")

// Defaults (Sandstorm 3.0 read 16 KB per packet and allowed 1000 pending
// write requests per socket).
const (
	DefaultReadBuffer     = 16 << 10
	DefaultMaxInbound     = 1 << 20
	DefaultMaxWriteBytes  = 1 << 20
	DefaultMaxWrites      = 1000
	DefaultCloseTimeout   = 30 * time.Second
	DefaultPollInterval   = time.Millisecond
	DefaultConnectTimeout = 10 * time.Second
	DefaultWriteWindow    = 256 << 10
	DefaultOutputBudget   = 64 << 20
	DefaultLingerTimeout  = 2 * time.Second
)

// ByteSize is a number of bytes that YAML may spell as an integer or with a
// binary unit: 512, 16KiB, 16K, 16KB, 1MiB, 1M, 2GiB (K, KB and KiB all mean
// 1024). A negative value means "unbounded" where a field says so.
type ByteSize int64

// ParseByteSize parses "16KiB", "1M", "4096" or "-1".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w: empty byte size", ErrInvalidConfig)
	}
	num := t
	mult := int64(1)
	upper := strings.ToUpper(t)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{
		{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
	} {
		if strings.HasSuffix(upper, u.suffix) {
			num = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: bad byte size %q (want e.g. 4096, 16KiB, 1MiB)", ErrInvalidConfig, s)
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, fmt.Errorf("%w: byte size %q overflows", ErrInvalidConfig, s)
	}
	return ByteSize(n * mult), nil
}

// UnmarshalText accepts an integer or a number with a unit, as
// ParseByteSize does (configuration files spell byte sizes so).
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// String formats b with the largest exact binary unit.
func (b ByteSize) String() string {
	switch {
	case b != 0 && b%(1<<30) == 0:
		return strconv.FormatInt(int64(b>>30), 10) + "GiB"
	case b != 0 && b%(1<<20) == 0:
		return strconv.FormatInt(int64(b>>20), 10) + "MiB"
	case b != 0 && b%(1<<10) == 0:
		return strconv.FormatInt(int64(b>>10), 10) + "KiB"
	}
	return strconv.FormatInt(int64(b), 10)
}

// ClogPolicy says what happens when a write would push a connection past its
// write threshold. In both cases the write is refused with an error wrapping
// sink.ErrRejected and ErrClogged, and a SinkClogged event is delivered once
// per episode.
type ClogPolicy string

const (
	// ClogReject (the default) only refuses writes until the peer catches
	// up; an IdleTimeout closes peers that stop reading altogether.
	ClogReject ClogPolicy = "reject"
	// ClogClose also closes the connection (thesis ch. 6 §2.2: a slow
	// Gnutella peer is dropped; it will reconnect elsewhere).
	ClogClose ClogPolicy = "close"
)

// InboundPolicy says what a connection does with incoming bytes while their
// delivery waits: before StartReader, while the reader sink rejects a
// packet, and while the read-rate governor says wait.
type InboundPolicy string

const (
	// InboundPause (the default) stops reading the socket until delivery
	// can go on: the bytes stay in the kernel, whose receive window closes,
	// so TCP flow control holds the peer back, and nothing is lost or read
	// faster than the application accepts it. gnet has no call for this:
	// the connection changes its epoll registration underneath gnet. Where
	// that is impossible (gnet built with the poll_opt tag, or an OS other
	// than Linux) connections are counted in SocketStats.PauseUnsupported,
	// a warning is logged, and MaxInbound applies as with InboundClose.
	// Before StartReader, up to ReadBuffer bytes are read, so that a peer
	// that sends a request and closes is seen to close.
	InboundPause InboundPolicy = "pause"
	// InboundClose keeps reading the socket into gnet's inbound buffer
	// while delivery waits; past MaxInbound unread bytes the connection is
	// closed with ErrInboundOverflow (ClosedOverflow; the bytes it received
	// are still delivered before SinkClosed): load shedding of peers that
	// send faster than the application reads.
	InboundClose InboundPolicy = "close"
)

// WriteThreshold bounds what a connection may hold unsent: bytes accepted by
// Enqueue and not yet written to the kernel, and write requests not yet
// completed (a Flush, or any request without bytes, is not counted). A single write larger than Bytes is accepted when nothing else
// is outstanding, so that it can be sent at all.
type WriteThreshold struct {
	Bytes  ByteSize `yaml:"bytes"`  // 0 → 1 MiB; < 0: unbounded
	Writes int      `yaml:"writes"` // 0 → 1000; < 0: unbounded
}

// RateConfig is the optional read-rate governor (Sandstorm's ReadStage rate
// controller): a token bucket that paces how fast packets are taken off the
// sockets and handed to the application. Zero rates mean no limit.
//
// While the governor says wait, the connection follows its InboundPolicy:
// with InboundPause it stops reading the socket, so the governed rate
// paces the peer itself; with InboundClose the bytes wait in gnet's inbound
// buffer, and a peer that keeps sending faster than the governed rate is
// closed past MaxInbound (load shedding).
type RateConfig struct {
	Bytes   float64 `yaml:"bytes"`   // bytes per second
	Packets float64 `yaml:"packets"` // packets per second
	// Burst is how much rate the bucket may bank (0 → 100ms): depth =
	// rate × Burst, at least one packet and one read buffer.
	Burst time.Duration `yaml:"burst"`
	// PerConnection gives every connection its own bucket; by default one
	// bucket governs the whole server socket, as in Sandstorm.
	PerConnection bool `yaml:"perConnection"`
}

// Enabled reports whether any limit is set.
func (r RateConfig) Enabled() bool { return r.Bytes > 0 || r.Packets > 0 }

// SocketConfig configures a server or client socket and the connections it
// makes. The zero value is usable: every zero field takes its default.
type SocketConfig struct {
	// Addr is host:port (TCP), or a gnet URL: tcp://, tcp4://, tcp6://,
	// unix://path. Servers listen on it; clients ignore it.
	Addr string `yaml:"addr"`
	// EventLoops is the number of gnet event loops (0 → one per CPU).
	EventLoops int `yaml:"eventLoops"`
	// ReusePort binds one listener per event loop with SO_REUSEPORT
	// (needs a fixed port).
	ReusePort bool `yaml:"reusePort"`
	// MaxConnections bounds a server's open connections (0: unbounded):
	// beyond it, a connection is closed as soon as it is accepted, before
	// it takes an event-loop slot or a buffer (counted in OverLimit and
	// RejectedAccepts), so that descriptors stay available to the
	// connections being served.
	MaxConnections int `yaml:"maxConnections"`
	// ReadBuffer is gnet's read size and the largest packet (0 → 16 KiB).
	ReadBuffer ByteSize `yaml:"readBuffer"`
	// InboundPolicy says what happens to incoming bytes while their
	// delivery waits: "pause" (the default) stops reading the socket,
	// "close" keeps reading and closes past MaxInbound.
	InboundPolicy InboundPolicy `yaml:"inboundPolicy"`
	// MaxInbound bounds the unread bytes held in gnet's buffer for a
	// connection whose delivery waits (no reader yet, reader sink
	// rejecting, governor); past it the connection is closed with
	// ErrInboundOverflow (0 → 1 MiB; < 0: unbounded). With InboundPause it
	// is a safety net only.
	MaxInbound     ByteSize       `yaml:"maxInbound"`
	WriteThreshold WriteThreshold `yaml:"writeThreshold"`
	ClogPolicy     ClogPolicy     `yaml:"clogPolicy"` // "" → reject
	// IdleTimeout closes a connection that neither received bytes nor got
	// any of its output written for this long (0: never). A connection
	// that stopped reading because its reader sink is behind is not idle.
	IdleTimeout time.Duration `yaml:"idleTimeout"`
	// WriteWindow bounds the bytes of a connection handed to its event
	// loop and not yet written to the kernel (what gnet copies into its
	// buffer when the peer reads slowly). Bytes queued beyond it wait, by
	// reference, in the connection (0 → 256 KiB; < 0: unbounded).
	WriteWindow ByteSize `yaml:"writeWindow"`
	// OutputBudget bounds the same bytes over every connection of the
	// socket together (0 → 64 MiB; < 0: unbounded); the rest waits by
	// reference. When it is used up, a connection with nothing pending may
	// still hand over 4 KiB at a time, so that slow readers holding the
	// budget (until WriteTimeout closes them) cannot starve the others:
	// the bound is OutputBudget plus 4 KiB per connection.
	OutputBudget ByteSize `yaml:"outputBudget"`
	// WriteTimeout aborts a connection whose output makes no progress
	// toward the kernel for this long (a peer that stopped reading:
	// ClosedWriteTimeout, ErrWriteTimeout). 0: never.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// LingerTimeout bounds a lingering close (Connection.Linger): how long
	// input is read and discarded after the last response (0 → 2s; < 0:
	// Linger closes like Close).
	LingerTimeout time.Duration `yaml:"lingerTimeout"`
	// CloseTimeout bounds a graceful Close waiting for output to drain;
	// then the connection is aborted (0 → 30s; < 0: wait forever).
	CloseTimeout time.Duration `yaml:"closeTimeout"`
	ReadRate     RateConfig    `yaml:"readRate"`
	// SendBuffer and RecvBuffer set the kernel socket buffers (0: OS default).
	SendBuffer ByteSize `yaml:"sendBuffer"`
	RecvBuffer ByteSize `yaml:"recvBuffer"`
	// KeepAlive enables TCP keep-alive probes with this period (0: off).
	KeepAlive time.Duration `yaml:"keepAlive"`
	// ConnectTimeout bounds a client's dial (0 → 10s).
	ConnectTimeout time.Duration `yaml:"connectTimeout"`
	// PollInterval is the granularity of the socket's maintenance loop:
	// retries of rejected deliveries, governor wake-ups, drain checks for
	// write completions and graceful closes (0 → 1ms).
	PollInterval time.Duration `yaml:"pollInterval"`

	// TLS, when set, makes the socket speak TLS (crypto/tls), as a server
	// or a client: the handshake runs on the manager's handshake stage (so
	// Env.Manager is required) and the application gets the connection once it
	// succeeded (a client: ConnectFailed otherwise); records are decrypted
	// as packets arrive and writes are encrypted. See TLSConfig.
	TLS *TLSConfig `yaml:"tls"`

	// Name names the socket in metrics and logs (default: derived from the
	// address; Config.Socket sets the socket's name in the file).
	Name string `yaml:"-"`
}

// Env is what a socket is plugged into. It is wiring, passed in code
// beside the SocketConfig (which configuration files set), never read
// from a file. The zero Env is usable: no manager, no metrics, no logs.
type Env struct {
	// Manager, when set, registers the socket's metrics in the manager's
	// registry, makes a server stop accepting when the manager raises
	// stage.SignalShutdownStarted, and runs TLS handshakes on the
	// manager's handshake stage (a TLS socket needs it).
	Manager *stage.Manager
	// Metrics is the registry for the socket's metrics (default: the
	// Manager's, if any).
	Metrics metrics.Registry
	// Logger receives the socket's logs and gnet's (nil: the Manager's
	// logger, else discard).
	Logger *slog.Logger
}

// withDefaults returns env with the Manager's registry and logger where
// it gives none.
func (env Env) withDefaults() Env {
	if env.Metrics == nil && env.Manager != nil {
		env.Metrics = env.Manager.Metrics()
	}
	if env.Logger == nil {
		if env.Manager != nil {
			env.Logger = env.Manager.Logger()
		} else {
			env.Logger = slog.New(slog.DiscardHandler)
		}
	}
	return env
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c SocketConfig) Validate() error {
	if msg := c.problem(); msg != "" {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, msg)
	}
	return nil
}

func (c SocketConfig) problem() string {
	bad := fmt.Sprintf
	switch {
	case c.EventLoops < 0:
		return bad("eventLoops %d is negative", c.EventLoops)
	case c.MaxConnections < 0:
		return bad("maxConnections %d is negative", c.MaxConnections)
	case c.ReadBuffer < 0:
		return bad("readBuffer %d is negative", c.ReadBuffer)
	case c.ReadBuffer > 64<<20:
		return bad("readBuffer %v is above 64MiB", c.ReadBuffer)
	case c.ClogPolicy != "" && c.ClogPolicy != ClogReject && c.ClogPolicy != ClogClose:
		return bad("unknown clogPolicy %q (known: reject, close)", c.ClogPolicy)
	case c.InboundPolicy != "" && c.InboundPolicy != InboundPause && c.InboundPolicy != InboundClose:
		return bad("unknown inboundPolicy %q (known: pause, close)", c.InboundPolicy)
	case c.IdleTimeout < 0:
		return bad("idleTimeout %v is negative", c.IdleTimeout)
	case c.WriteTimeout < 0:
		return bad("writeTimeout %v is negative", c.WriteTimeout)
	case c.ReadRate.Bytes < 0 || math.IsNaN(c.ReadRate.Bytes) || math.IsInf(c.ReadRate.Bytes, 0):
		return bad("readRate.bytes %v must be a finite number ≥ 0", c.ReadRate.Bytes)
	case c.ReadRate.Packets < 0 || math.IsNaN(c.ReadRate.Packets) || math.IsInf(c.ReadRate.Packets, 0):
		return bad("readRate.packets %v must be a finite number ≥ 0", c.ReadRate.Packets)
	case c.ReadRate.Burst < 0:
		return bad("readRate.burst %v is negative", c.ReadRate.Burst)
	case c.SendBuffer < 0 || c.RecvBuffer < 0:
		return bad("socket buffer sizes must be ≥ 0")
	case c.KeepAlive < 0:
		return bad("keepAlive %v is negative", c.KeepAlive)
	case c.ConnectTimeout < 0:
		return bad("connectTimeout %v is negative", c.ConnectTimeout)
	case c.PollInterval < 0:
		return bad("pollInterval %v is negative", c.PollInterval)
	}
	return ""
}

// withDefaults returns c with zero fields replaced by defaults.
func (c SocketConfig) withDefaults() SocketConfig {
	if c.ReadBuffer == 0 {
		c.ReadBuffer = DefaultReadBuffer
	}
	if c.MaxInbound == 0 {
		c.MaxInbound = DefaultMaxInbound
	}
	if c.WriteThreshold.Bytes == 0 {
		c.WriteThreshold.Bytes = DefaultMaxWriteBytes
	}
	if c.WriteThreshold.Writes == 0 {
		c.WriteThreshold.Writes = DefaultMaxWrites
	}
	if c.ClogPolicy == "" {
		c.ClogPolicy = ClogReject
	}
	if c.InboundPolicy == "" {
		c.InboundPolicy = InboundPause
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.WriteWindow == 0 {
		c.WriteWindow = DefaultWriteWindow
	}
	if c.OutputBudget == 0 {
		c.OutputBudget = DefaultOutputBudget
	}
	if c.LingerTimeout == 0 {
		c.LingerTimeout = DefaultLingerTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ReadRate.Burst == 0 {
		c.ReadRate.Burst = 100 * time.Millisecond
	}
	return c
}

// FileConfig configures the asyncFile stage.
type FileConfig struct {
	// Stage is the stage's name (0 → "aio.file").
	Stage string `yaml:"stage"`
	// ThreadPool sizes the stage (defaults: min 1, max 20, the thread-pool
	// controller on, ticking every 200ms and adding a worker while 2 or more
	// files wait).
	ThreadPool stage.ThreadPoolConfig `yaml:"threadpool"`
	// FixedPool turns the thread-pool controller off.
	FixedPool bool `yaml:"fixedPool"`
	// Queue bounds the stage's queue: files with work waiting for a worker
	// plus ReadFile requests (≤ 0: unbounded).
	Queue stage.QueueConfig `yaml:"queue"`
	// MaxPending bounds the requests queued on one file (0 → 1000).
	MaxPending int `yaml:"maxPending"`
	// MaxReadFile bounds ReadFile (0 → 64 MiB; < 0: unbounded).
	MaxReadFile ByteSize `yaml:"maxReadFile"`
}

// DefaultFileStage is the name of the asyncFile stage.
const DefaultFileStage = "aio.file"

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c FileConfig) Validate() error {
	if msg := c.problem(); msg != "" {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, msg)
	}
	return nil
}

func (c FileConfig) problem() string {
	switch {
	case c.MaxPending < 0:
		return fmt.Sprintf("maxPending %d is negative", c.MaxPending)
	case c.ThreadPool.Min < 0 || c.ThreadPool.Max < 0 || c.ThreadPool.Initial < 0:
		return "threadpool: negative thread count"
	case c.ThreadPool.Max > 0 && c.ThreadPool.Min > c.ThreadPool.Max:
		return fmt.Sprintf("threadpool: min %d is above max %d", c.ThreadPool.Min, c.ThreadPool.Max)
	}
	if err := c.ThreadPool.Controller.Validate(); err != nil {
		return "threadpool.controller: " + err.Error()
	}
	return ""
}

func (c FileConfig) withDefaults() FileConfig {
	if c.Stage == "" {
		c.Stage = DefaultFileStage
	}
	tp := &c.ThreadPool
	if tp.Min == 0 {
		tp.Min = 1
	}
	if tp.Max == 0 {
		tp.Max = 20
	}
	if !c.FixedPool {
		tp.Controller.Enabled = true
		if tp.Controller.Interval == 0 {
			tp.Controller.Interval = 200 * time.Millisecond
		}
		if tp.Controller.QueueThreshold == 0 {
			tp.Controller.QueueThreshold = 2
		}
	}
	if c.MaxPending == 0 {
		c.MaxPending = 1000
	}
	if c.MaxReadFile == 0 {
		c.MaxReadFile = 64 << 20
	}
	return c
}

// Config is the `global.aio` block of a stage configuration: defaults for
// every socket, named sockets, and the asyncFile stage.
//
//	global:
//	  aio:
//	    eventLoops: 2
//	    readBuffer: 16KiB
//	    writeThreshold: {bytes: 1MiB, writes: 1000}
//	    idleTimeout: 60s
//	    sockets:
//	      http: {addr: "127.0.0.1:8080", clogPolicy: close}
//	    file: {threadpool: {max: 20}}
type Config struct {
	// Defaults applies to every socket.
	Defaults SocketConfig `yaml:",inline"`
	// Sockets holds named sockets; each starts from Defaults.
	Sockets map[string]SocketConfig `yaml:"-"`
	File    FileConfig              `yaml:"file"`
}

// Socket returns the named socket's configuration, or Defaults and false.
func (c Config) Socket(name string) (SocketConfig, bool) {
	s, ok := c.Sockets[name]
	if !ok {
		s = c.Defaults
	}
	s.Name = name
	return s, ok
}

// configError wraps a located configuration error with ErrInvalidConfig.
type configError struct{ err error }

func (e *configError) Error() string   { return e.err.Error() }
func (e *configError) Unwrap() []error { return []error{ErrInvalidConfig, e.err} }

// ParseConfig decodes an aio block strictly: an unknown key, a bad size or
// duration is an error naming the file, line and key path. An absent or
// null block gives the defaults. Errors wrap ErrInvalidConfig and
// stage.ErrInvalidConfig. Linking aio in registers it as the section
// "aio", so that stage.ParseConfig (Load, Parse) calls it.
func ParseConfig(d stage.Decoder) (Config, error) {
	var n yaml.Node
	if err := d.Decode(&n); err != nil {
		return Config{}, err
	}
	cfg, err := parseConfig(&n, d.Path())
	if err != nil {
		return Config{}, &stage.ConfigError{File: d.File(), Err: &configError{err}}
	}
	return cfg, nil
}

func parseConfig(n *yaml.Node, path string) (Config, error) {
	var cfg Config
	if n == nil || n.Kind == 0 {
		return cfg, nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return cfg, nil
	}
	if n.Kind != yaml.MappingNode {
		return cfg, yamlstrict.Errorf(n, path, "want a mapping")
	}
	if err := yamlstrict.Decode(n, path, &cfg, "sockets"); err != nil {
		return cfg, err
	}
	if cfg.Defaults.Addr != "" {
		return cfg, yamlstrict.Errorf(lookupKey(n, "addr"), yamlstrict.Join(path, "addr"),
			"addr belongs in a socket block under sockets:")
	}
	if msg := cfg.Defaults.problem(); msg != "" {
		return cfg, yamlstrict.Errorf(n, path, "%s", msg)
	}
	if msg := cfg.File.problem(); msg != "" {
		return cfg, yamlstrict.Errorf(lookupKey(n, "file"), yamlstrict.Join(path, "file"), "%s", msg)
	}
	if sn := lookupKey(n, "sockets"); sn != nil && !(sn.Kind == yaml.ScalarNode && sn.Tag == "!!null") {
		if sn.Kind != yaml.MappingNode {
			return cfg, yamlstrict.Errorf(sn, yamlstrict.Join(path, "sockets"), "want a mapping of socket names to socket blocks")
		}
		cfg.Sockets = map[string]SocketConfig{}
		for i := 0; i+1 < len(sn.Content); i += 2 {
			k, v := sn.Content[i], sn.Content[i+1]
			sp := yamlstrict.Join(yamlstrict.Join(path, "sockets"), k.Value)
			if _, dup := cfg.Sockets[k.Value]; dup {
				return cfg, yamlstrict.Errorf(k, sp, "socket defined twice")
			}
			sc := cfg.Defaults
			if err := yamlstrict.Decode(v, sp, &sc); err != nil {
				return cfg, err
			}
			if msg := sc.problem(); msg != "" {
				return cfg, yamlstrict.Errorf(v, sp, "%s", msg)
			}
			cfg.Sockets[k.Value] = sc
		}
	}
	return cfg, nil
}

func lookupKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// sectionName is aio's section of `global:`.
const sectionName = "aio"

// ConfigOf returns the `global.aio` block of the configuration m was built
// from, as the load decoded it (defaults if m has none). It fails only if
// the section was set in Go to a value that is not a Config.
func ConfigOf(m *stage.Manager) (Config, error) {
	if m == nil || m.Config() == nil {
		return Config{}, nil
	}
	v, ok := m.Config().Global.Section(sectionName)
	if !ok {
		return Config{}, nil
	}
	cfg, ok := v.(Config)
	if !ok {
		return Config{}, fmt.Errorf("%w: section %s holds a %T, not an aio.Config", ErrInvalidConfig, sectionName, v)
	}
	return cfg, nil
}
