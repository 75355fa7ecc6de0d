package aio

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

func TestGovernor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ms    int
		want  int
		grant int
		wait  time.Duration
	}
	tests := []struct {
		name  string
		cfg   RateConfig
		buf   int
		steps []step
	}{
		{
			name: "packets: burst then one per 1/rate",
			cfg:  RateConfig{Packets: 10, Burst: 200 * time.Millisecond}, // depth 2
			buf:  100,
			steps: []step{
				{ms: 0, want: 50, grant: 50},
				{ms: 0, want: 50, grant: 50},
				{ms: 0, want: 50, grant: 0, wait: 100 * time.Millisecond},
				{ms: 50, want: 50, grant: 0, wait: 50 * time.Millisecond},
				{ms: 100, want: 50, grant: 50},
				{ms: 100, want: 50, grant: 0, wait: 100 * time.Millisecond},
			},
		},
		{
			name: "bytes: grants partial packets, waits for a full read buffer",
			cfg:  RateConfig{Bytes: 1000, Burst: time.Second}, // depth 1000 ≥ buffer 400
			buf:  400,
			steps: []step{
				{ms: 0, want: 400, grant: 400},
				{ms: 0, want: 1000, grant: 600}, // all that is left
				{ms: 0, want: 400, grant: 0, wait: 400 * time.Millisecond},
				{ms: 200, want: 100, grant: 100}, // small wants need few tokens
				{ms: 200, want: 400, grant: 0, wait: 300 * time.Millisecond},
			},
		},
		{
			name: "idle time refills only to the depth",
			cfg:  RateConfig{Packets: 100, Burst: 10 * time.Millisecond}, // depth 1
			buf:  10,
			steps: []step{
				{ms: 0, want: 10, grant: 10},
				{ms: 60000, want: 10, grant: 10},
				{ms: 60000, want: 10, grant: 0, wait: 10 * time.Millisecond},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGovernor(tt.cfg, tt.buf)
			for i, s := range tt.steps {
				grant, wait := g.Take(at(s.ms), s.want)
				if grant != s.grant || wait != s.wait {
					t.Fatalf("step %d at %dms want %d: got (%d, %v), want (%d, %v)", i, s.ms, s.want, grant, wait, s.grant, s.wait)
				}
			}
		})
	}
}

func TestGovernorBytesGrantIsBoundedByTokens(t *testing.T) {
	t0 := time.Unix(0, 0)
	g := NewGovernor(RateConfig{Bytes: 100, Burst: time.Second}, 64) // depth 100
	if grant, _ := g.Take(t0, 1000); grant != 100 {
		t.Fatalf("grant %d, want the 100 tokens of the bucket", grant)
	}
	// 0.5 s later 50 tokens: less than a read buffer, so wait for 14 more.
	if grant, wait := g.Take(t0.Add(500*time.Millisecond), 1000); grant != 0 || wait != 140*time.Millisecond {
		t.Fatalf("got (%d, %v), want (0, 140ms)", grant, wait)
	}
	// 0.7 s: 70 tokens, at least a read buffer: all of them.
	if grant, wait := g.Take(t0.Add(700*time.Millisecond), 1000); grant != 70 || wait != 0 {
		t.Fatalf("got (%d, %v), want (70, 0)", grant, wait)
	}
}

func TestOutboxOrderAndRetry(t *testing.T) {
	rec := newRecorder("target")
	reject := true
	rec.setReject(func(sink.Event) bool { return reject })
	hooks := &countingHooks{}
	o := postbox{hooks: hooks}
	if o.send(delivery{to: rec, ev: 1}) {
		t.Fatal("send reported delivery to a rejecting sink")
	}
	if o.send(delivery{to: rec, ev: 2}) || hooks.retries != 2 || hooks.rejected != 2 || o.empty() {
		t.Fatalf("retries %d, rejections %d, empty %v", hooks.retries, hooks.rejected, o.empty())
	}
	if err := o.sendNow(delivery{to: rec, ev: 3}); err == nil {
		t.Fatal("sendNow jumped the queue")
	}
	rec.setReject(func(sink.Event) bool { return false })
	reject = false
	if !o.drain() || !o.empty() {
		t.Fatal("drain did not deliver")
	}
	closed := fnSink(func(sink.Event) error { return &sink.ClosedError{Sink: "gone"} })
	o.send(delivery{to: closed, ev: 4})
	if o.send(delivery{to: rec, ev: 5}) != true {
		t.Fatal("an event behind a closed sink stayed stuck")
	}
	got := rec.events()
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 5 || len(hooks.lost) != 1 || hooks.lost[0] != 4 {
		t.Fatalf("delivered %v, lost %v", got, hooks.lost)
	}
	if err := o.sendNow(delivery{to: rec, ev: 6}); err != nil {
		t.Fatal(err)
	}
	// sendNow does not wait for a delivery in progress elsewhere.
	if !o.claim() {
		t.Fatal("an empty postbox could not be claimed")
	}
	if err := o.sendNow(delivery{to: rec, ev: 7}); err != nil {
		t.Fatalf("sendNow refused because another delivery was running: %v", err)
	}
}

// countingHooks are a postbox's hooks that count what they are called for.
type countingHooks struct {
	retries, soon, rejected int
	lost                    []sink.Event
}

func (h *countingHooks) retryDrain()                   { h.retries++ }
func (h *countingHooks) drainSoon()                    { h.soon++ }
func (h *countingHooks) countRejected()                { h.rejected++ }
func (h *countingHooks) lostEvent(d delivery, _ error) { h.lost = append(h.lost, d.ev) }

func TestDeque(t *testing.T) {
	var d deque[int]
	next, want := 0, 0
	for round := range 50 {
		for range round % 7 {
			d.push(next)
			next++
		}
		for range round % 5 {
			if d.len() == 0 {
				break
			}
			if v := d.pop(); v != want {
				t.Fatalf("pop %d, want %d", v, want)
			}
			want++
		}
	}
	if d.len() != next-want {
		t.Fatalf("len %d, want %d", d.len(), next-want)
	}
	if d.len() > 0 {
		if v := d.popBack(); v != next-1 {
			t.Fatalf("popBack %d, want %d", v, next-1)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want ByteSize
		err  bool
	}{
		{"4096", 4096, false},
		{"16KiB", 16 << 10, false},
		{"16k", 16 << 10, false},
		{"16 KB", 16 << 10, false},
		{"1MiB", 1 << 20, false},
		{"2G", 2 << 30, false},
		{"512B", 512, false},
		{"-1", -1, false},
		{"", 0, true},
		{"KiB", 0, true},
		{"1.5MiB", 0, true},
		{"12XB", 0, true},
		{"99999999999999999GiB", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseByteSize(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseByteSize(%q): error %v does not wrap ErrInvalidConfig", tt.in, err)
		}
	}
	for _, b := range []ByteSize{0, 100, 16 << 10, 3 << 20, 2 << 30} {
		if back, err := ParseByteSize(b.String()); err != nil || back != b {
			t.Errorf("round trip of %d via %q: %v, %v", b, b.String(), back, err)
		}
	}
}

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"4096", "16KiB", "1M", "-1", "2 GB", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseByteSize(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		back, err := ParseByteSize(b.String())
		if err != nil || back != b {
			t.Fatalf("%q parsed to %d, whose String %q parses to %d, %v", s, b, b.String(), back, err)
		}
	})
}

func parseYAML(t testing.TB, src string) (stage.Decoder, error) {
	t.Helper()
	return stage.NewDecoder([]byte(src), "", "global.aio")
}

func TestParseConfig(t *testing.T) {
	n, err := parseYAML(t, `
eventLoops: 2
readBuffer: 8KiB
writeThreshold: {bytes: 2MiB, writes: 50}
idleTimeout: 90s
readRate: {packets: 500}
sockets:
  http: {addr: "127.0.0.1:8080", clogPolicy: close, eventLoops: 4, inboundPolicy: close}
  admin: {addr: "unix:///tmp/admin.sock"}
file:
  threadpool: {max: 8}
  maxReadFile: 16MiB
`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(n)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Defaults
	if d.EventLoops != 2 || d.ReadBuffer != 8<<10 || d.WriteThreshold.Bytes != 2<<20 || d.WriteThreshold.Writes != 50 ||
		d.IdleTimeout != 90*time.Second || d.ReadRate.Packets != 500 {
		t.Fatalf("defaults %+v", d)
	}
	http, ok := cfg.Socket("http")
	if !ok || http.Addr != "127.0.0.1:8080" || http.ClogPolicy != ClogClose || http.EventLoops != 4 || http.InboundPolicy != InboundClose ||
		http.ReadBuffer != 8<<10 || http.IdleTimeout != 90*time.Second || http.Name != "http" {
		t.Fatalf("http socket %+v: want its own keys over the defaults", http)
	}
	if _, ok := cfg.Socket("missing"); ok {
		t.Fatal("Socket found a missing name")
	}
	if cfg.File.ThreadPool.Max != 8 || cfg.File.MaxReadFile != 16<<20 {
		t.Fatalf("file %+v", cfg.File)
	}
	empty, _ := parseYAML(t, "")
	if cfg, err := ParseConfig(empty); err != nil || cfg.Sockets != nil {
		t.Fatalf("nil node: %+v, %v", cfg, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		src  string
		want string // in the message, with the line
	}{
		{"readBufer: 1KiB", "line 1: global.aio.readBufer: unknown key"},
		{"readBuffer: lots", "line 1"},
		{"idleTimeout: 5 minutes", "global.aio.idleTimeout: bad duration"},
		{"eventLoops: -2", "eventLoops -2 is negative"},
		{"clogPolicy: drop", `unknown clogPolicy "drop"`},
		{"inboundPolicy: drop", `unknown inboundPolicy "drop"`},
		{"addr: 127.0.0.1:80", "addr belongs in a socket block"},
		{"sockets:\n  web: {adr: x}", "line 2: global.aio.sockets.web.adr: unknown key"},
		{"sockets:\n  web: {readRate: {bytes: -5}}", "readRate.bytes"},
		{"sockets: [a, b]", "want a mapping of socket names"},
		{"file: {maxPending: -1}", "maxPending -1 is negative"},
		{"file: {threadpool: {min: 5, max: 2}}", "min 5 is above max 2"},
		{"- a\n- b", "want a mapping"},
	}
	for _, tt := range tests {
		n, err := parseYAML(t, tt.src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseConfig(n)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to mention %q", tt.src, err, tt.want)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%q: %v does not wrap ErrInvalidConfig", tt.src, err)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"eventLoops: 2\nsockets:\n  a: {addr: '127.0.0.1:1'}",
		"readBuffer: 16KiB\nwriteThreshold: {bytes: 1MiB}",
		"file: {threadpool: {max: 3}}",
		"idleTimeout: 1s\nreadRate: {bytes: 100, burst: 10ms}",
		"[1, 2]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		n, err := parseYAML(t, src)
		if err != nil {
			return
		}
		cfg, err := ParseConfig(n)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		// A configuration that parses is valid.
		if err := cfg.Defaults.Validate(); err != nil {
			t.Fatalf("accepted defaults fail Validate: %v", err)
		}
		for name, s := range cfg.Sockets {
			if err := s.Validate(); err != nil {
				t.Fatalf("accepted socket %q fails Validate: %v", name, err)
			}
		}
		if err := cfg.File.Validate(); err != nil {
			t.Fatalf("accepted file block fails Validate: %v", err)
		}
	})
}

func TestConfigOfManager(t *testing.T) {
	m, err := stage.Parse([]byte(`
global:
  aio:
    readBuffer: 4KiB
    sockets:
      web: {addr: "127.0.0.1:0"}
`), stage.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigOf(m)
	if err != nil {
		t.Fatal(err)
	}
	if web, ok := cfg.Socket("web"); !ok || web.ReadBuffer != 4<<10 {
		t.Fatalf("web %+v", web)
	}
	// aio registers its section with stage, so a bad block already fails
	// the load, located.
	_, err = stage.Parse([]byte("global:\n  aio:\n    sockets:\n      web: {bogus: 1}\n"), stage.NewRegistry())
	var ye *yamlstrict.Error
	if !errors.Is(err, stage.ErrInvalidConfig) || !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ye) || ye.Line != 4 {
		t.Fatalf("error %v: want a located configuration error on line 4", err)
	}
	if cfg, err := ConfigOf(stage.NewManager(stage.Options{})); err != nil || cfg.Sockets != nil {
		t.Fatalf("manager without a config: %+v, %v", cfg, err)
	}
}

func TestSocketConfigDefaults(t *testing.T) {
	c := SocketConfig{}.withDefaults()
	if c.ReadBuffer != DefaultReadBuffer || c.MaxInbound != DefaultMaxInbound || c.WriteThreshold.Bytes != DefaultMaxWriteBytes ||
		c.WriteThreshold.Writes != DefaultMaxWrites || c.ClogPolicy != ClogReject || c.InboundPolicy != InboundPause || c.CloseTimeout != DefaultCloseTimeout ||
		c.PollInterval != DefaultPollInterval || c.ConnectTimeout != DefaultConnectTimeout || (Env{}).withDefaults().Logger == nil {
		t.Fatalf("defaults %+v", c)
	}
	f := FileConfig{}.withDefaults()
	if f.Stage != DefaultFileStage || f.ThreadPool.Min != 1 || f.ThreadPool.Max != 20 || !f.ThreadPool.Controller.Enabled ||
		f.MaxPending != 1000 || f.MaxReadFile != 64<<20 {
		t.Fatalf("file defaults %+v", f)
	}
	if f := (FileConfig{FixedPool: true}).withDefaults(); f.ThreadPool.Controller.Enabled {
		t.Fatal("FixedPool left the controller on")
	}
}

func TestWatchHeap(t *testing.T) {
	e := newEngine(SocketConfig{}.withDefaults(), Env{}.withDefaults(), "t")
	a, b, c := &Connection{}, &Connection{}, &Connection{}
	e.armAt(a, 300)
	e.armAt(b, 100)
	e.armAt(c, 200)
	e.armAt(a, 50)  // earlier: moves a forward
	e.armAt(b, 500) // later: b stays due at 100
	if due, ok := e.nextDue(); !ok || due != 50 {
		t.Fatalf("nextDue %d, %v; want 50", due, ok)
	}
	if got := e.takeDue(150, nil); len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("takeDue(150) = %v, want a then b", got)
	}
	if got := e.takeDue(150, nil); len(got) != 0 {
		t.Fatalf("stale entries came back: %v", got)
	}
	if due, _ := e.nextDue(); due != 200 {
		t.Fatalf("nextDue %d, want 200", due)
	}
	if !e.watching() {
		t.Fatal("c is still watched")
	}
	if got := e.takeAll(); len(got) != 1 || got[0] != c || e.watching() {
		t.Fatalf("takeAll = %v", got)
	}
	if _, ok := e.nextDue(); ok {
		t.Fatal("nextDue after takeAll")
	}
}

// TestWatchHeapOrderAndAllocations: items come out of the watch heap in
// due order whatever order they went in, and arming a connection and
// taking it when due allocates nothing once the heap, the map and the
// maintenance goroutine's slice have grown (container/heap boxed every
// item: two objects per connection armed and taken).
func TestWatchHeapOrderAndAllocations(t *testing.T) {
	var h watchHeap
	rng := rand.New(rand.NewPCG(1, 2))
	dues := make([]int64, 500)
	for i := range dues {
		dues[i] = rng.Int64N(1000)
		h.push(watchItem{due: dues[i]})
	}
	slices.Sort(dues)
	for i, want := range dues {
		if got := h.pop().due; got != want {
			t.Fatalf("item %d: due %d, want %d", i, got, want)
		}
	}
	if len(h) != 0 {
		t.Fatalf("%d items left", len(h))
	}

	e := newEngine(SocketConfig{}.withDefaults(), Env{}.withDefaults(), "t")
	conns := []*Connection{{}, {}, {}, {}}
	var out []*Connection
	now := int64(0)
	cycle := func() {
		now += 10
		for i, c := range conns {
			e.armAt(c, now+int64(i))
		}
		out = e.takeDue(now+int64(len(conns)), out)
		if len(out) != len(conns) {
			t.Fatalf("took %d connections, want %d", len(out), len(conns))
		}
	}
	cycle() // grows the heap, the map and out
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Errorf("%.1f allocations per %d connections armed and taken, want 0", n, len(conns))
	}
}
