package haboob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// DegraderConfig configures a Degrader. Zero fields take the defaults
// shown.
type DegraderConfig struct {
	Min      float64       // lowest quality, in (0, 1] (default 0.05)
	Increase float64       // quality added per period under target (default 0.02)
	Decrease float64       // quality divided by this per period over target (default 1.25)
	Interval time.Duration // adjustment period (default 100ms)
	// Admission re-enables admission control when the quality is at Min
	// and the response time still exceeds the target, and disables it
	// once the response time is below half the target (thesis §7.3.4,
	// Fig. 57).
	Admission bool
}

// Degrader is the service-degradation controller of the SEDA thesis
// (§7.2.2, §7.3.4): a stage samples its 90th-percentile response time and
// lowers a quality factor (less work per request) while it exceeds the
// target, raises it slowly while it is below, and, at the lowest quality,
// asks for admission control to be switched back on. It reads time only
// from its arguments. It is safe for concurrent use.
type Degrader struct {
	cfg DegraderConfig

	mu      sync.Mutex
	q       float64
	last    time.Time
	admit   bool
	updates uint64
}

// NewDegrader returns a controller at full quality with admission off.
func NewDegrader(cfg DegraderConfig) (*Degrader, error) {
	if cfg.Min == 0 {
		cfg.Min = 0.05
	}
	if cfg.Increase == 0 {
		cfg.Increase = 0.02
	}
	if cfg.Decrease == 0 {
		cfg.Decrease = 1.25
	}
	if cfg.Interval == 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	switch {
	case cfg.Min <= 0 || cfg.Min > 1:
		return nil, fmt.Errorf("haboob: degrader min quality %v not in (0, 1]", cfg.Min)
	case cfg.Increase < 0 || cfg.Increase > 1:
		return nil, fmt.Errorf("haboob: degrader increase %v not in [0, 1]", cfg.Increase)
	case cfg.Decrease < 1:
		return nil, fmt.Errorf("haboob: degrader decrease %v must be >= 1", cfg.Decrease)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("haboob: degrader interval %v is negative", cfg.Interval)
	}
	return &Degrader{cfg: cfg, q: 1}, nil
}

// Quality returns the current quality factor in [Min, 1].
func (d *Degrader) Quality() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.q
}

// Admission reports whether the controller wants admission control on.
func (d *Degrader) Admission() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.admit
}

// Update feeds the current p90 response time (0: no measurement yet) and
// target at time now. At most once per Interval it adjusts the quality and
// the admission wish; it returns both.
func (d *Degrader) Update(now time.Time, p90, target time.Duration) (quality float64, admission bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p90 <= 0 || target <= 0 || now.Sub(d.last) < d.cfg.Interval {
		return d.q, d.admit
	}
	d.last = now
	d.updates++
	switch {
	case p90 > target:
		if d.q > d.cfg.Min {
			d.q = max(d.cfg.Min, d.q/d.cfg.Decrease)
		} else if d.cfg.Admission {
			d.admit = true
		}
	case d.admit:
		if p90 < target/2 {
			d.admit = false
		}
	default:
		d.q = min(1, d.q+d.cfg.Increase)
	}
	return d.q, d.admit
}

// checksumArgs are the Checksum handler's args.
type checksumArgs struct {
	// Work is how many bytes a request hashes at full quality (default
	// 1 MiB).
	Work       aio.ByteSize  `yaml:"work"`
	MinQuality float64       `yaml:"minQuality"`
	Increase   float64       `yaml:"increase"`
	Decrease   float64       `yaml:"decrease"`
	Interval   time.Duration `yaml:"interval"`
	// Admission lets the degrader switch the stage's rt admission control
	// on at the lowest quality (default true); false leaves the rt
	// predicate as configured.
	Admission  bool          `yaml:"admission"`
	Send       string        `yaml:"send"`
	RetryAfter time.Duration `yaml:"retryAfter"`
}

// checksum is the dynamic handler haboob.Checksum, the CPU-bound service
// of the thesis's degradation experiment (§7.3.4): each request hashes
// quality × Work bytes and gets an HTML page with the digest. The stage
// must be guarded by an rt predicate ({type: rt, target: ...}); its p90
// estimate drives the Degrader.
type checksum struct {
	srv  *Server
	log  *slog.Logger
	name string
	args checksumArgs
	rt   *enqueuepred.ResponseTime
	deg  *Degrader
	data []byte
	send sendFunc
	now  func() time.Time // the degrader's clock (time.Now; tests fake it)
}

// findRT returns the first response-time controller in a predicate tree.
func findRT(p sink.Predicate) *enqueuepred.ResponseTime {
	if rt, ok := p.(*enqueuepred.ResponseTime); ok {
		return rt
	}
	if parent, ok := p.(interface{ Children() []sink.Predicate }); ok {
		for _, c := range parent.Children() {
			if rt := findRT(c); rt != nil {
				return rt
			}
		}
	}
	return nil
}

func (h *checksum) Init(c *stage.Context) error {
	h.log = h.srv.logger(c)
	h.name = c.Stage().Name()
	h.now = time.Now
	h.args = checksumArgs{Work: 1 << 20, Admission: true, Send: StageHttpSend, RetryAfter: time.Second}
	if err := c.DecodeArgs(&h.args); err != nil {
		return err
	}
	if h.args.Work <= 0 {
		return fmt.Errorf("haboob: %s: work must be positive", h.name)
	}
	h.rt = findRT(c.Stage().Sink().Predicate())
	if h.rt == nil {
		return fmt.Errorf("haboob: %s needs an rt predicate on its stage, e.g. predicate: {type: rt, target: 100ms}", h.name)
	}
	var err error
	h.deg, err = NewDegrader(DegraderConfig{Min: h.args.MinQuality, Increase: h.args.Increase,
		Decrease: h.args.Decrease, Interval: h.args.Interval, Admission: h.args.Admission})
	if err != nil {
		return err
	}
	if h.args.Admission {
		h.rt.Disable() // degrade first; admission control comes back at the lowest quality
	}
	if h.send, err = stageSend(c, h.args.Send); err != nil {
		return fmt.Errorf("haboob: %s send stage: %w", h.name, err)
	}
	h.data = make([]byte, h.args.Work)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range h.data {
		h.data[i] = byte(r.Uint32())
	}
	c.Profile("quality", h.deg.Quality)
	h.srv.mu.Lock()
	h.srv.checksums = append(h.srv.checksums, h)
	h.srv.mu.Unlock()
	return nil
}

func (h *checksum) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		req, ok := e.(*http.Request)
		if !ok {
			h.log.Warn("haboob: Checksum: unexpected event", "type", fmt.Sprintf("%T", e))
			continue
		}
		q := h.adjust()
		n := max(1, int(q*float64(len(h.data))))
		sum := sha256.Sum256(h.data[:n])
		body := fmt.Sprintf("<!doctype html>\n<title>checksum</title>\n<h1>Checksum</h1>\n"+
			"<p>quality %.3f: SHA-256 of %d bytes</p>\n<p><code>%s</code></p>\n<p>p90 %v, target %v, admission control %v</p>\n",
			q, n, hex.EncodeToString(sum[:]), h.rt.P90().Round(time.Microsecond), h.rt.Target(), h.rt.Enabled())
		resp := http.OK("text/html; charset=utf-8", []byte(body))
		resp.Header.Add("X-Quality", strconv.FormatFloat(q, 'f', 3, 64))
		resp.Header.Add("Cache-Control", "no-store")
		send(h.send, &http.Reply{Req: req, Resp: resp}, h.args.RetryAfter)
	}
	return nil
}

// adjust runs the degrader and applies its admission wish.
func (h *checksum) adjust() float64 {
	q, admit := h.deg.Update(h.now(), h.rt.P90(), h.rt.Target())
	if h.args.Admission && admit != h.rt.Enabled() {
		if admit {
			h.rt.Enable()
			h.log.Info("haboob: lowest quality still too slow: admission control on", "p90", h.rt.P90())
		} else {
			h.rt.Disable()
			h.log.Info("haboob: response time recovered: admission control off", "p90", h.rt.P90())
		}
	}
	return q
}
