package haboob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

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
// estimate drives the Degrader. A configuration reload that replaces the
// stage's predicate (stage.SignalReloaded) retargets the Degrader to the
// new rt predicate.
type checksum struct {
	srv   *Server
	log   *slog.Logger
	name  string
	args  checksumArgs
	deg   *enqueuepred.Degrader // drives the stage's rt predicate: deg.ResponseTime()
	data  []byte
	send  sendFunc
	now   func() time.Time // the degrader's clock (time.Now; tests fake it)
	unsub func()           // the SignalReloaded subscription
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
	rt := enqueuepred.ResponseTimeOf(c.Stage().Sink().Predicate())
	if rt == nil {
		return fmt.Errorf("haboob: %s needs an rt predicate on its stage, e.g. predicate: {type: rt, target: 100ms}", h.name)
	}
	var err error
	h.deg, err = enqueuepred.NewDegrader(rt, enqueuepred.DegraderConfig{Min: h.args.MinQuality, Increase: h.args.Increase,
		Decrease: h.args.Decrease, Interval: h.args.Interval, Admission: h.args.Admission, Logger: h.log})
	if err != nil {
		return fmt.Errorf("haboob: %s: %w", h.name, err)
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
	st := c.Stage()
	h.unsub = c.Manager().SubscribeFunc(stage.SignalReloaded, func(sink.Event) { h.retarget(st.Sink().Predicate()) })
	return nil
}

// retarget hands the stage's rt predicate, which a reload may have
// replaced, to the degrader.
func (h *checksum) retarget(p sink.Predicate) {
	rt := enqueuepred.ResponseTimeOf(p)
	if rt == h.deg.ResponseTime() {
		return
	}
	if rt == nil {
		h.log.Warn("haboob: Checksum: the reload left no rt predicate on the stage; the quality stays where it is", "stage", h.name)
	}
	h.deg.Retarget(rt)
}

// Destroy ends the reload subscription and drops the handler from the
// server's statistics.
func (h *checksum) Destroy() error {
	if h.unsub != nil {
		h.unsub()
	}
	if h.srv != nil {
		h.srv.mu.Lock()
		h.srv.checksums = slices.DeleteFunc(h.srv.checksums, func(c *checksum) bool { return c == h })
		h.srv.mu.Unlock()
	}
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
			"<p>quality %.3f: SHA-256 of %d bytes</p>\n<p><code>%s</code></p>\n<p>%s</p>\n",
			q, n, hex.EncodeToString(sum[:]), rtState(h.deg.ResponseTime()))
		resp := http.OK("text/html; charset=utf-8", []byte(body))
		resp.Header.Add("X-Quality", strconv.FormatFloat(q, 'f', 3, 64))
		resp.Header.Add("Cache-Control", "no-store")
		send(h.send, &http.Reply{Req: req, Resp: resp}, h.args.RetryAfter)
	}
	return nil
}

// adjust runs the degrader, which applies its admission wish to the
// stage's rt predicate, and returns the quality to serve at.
func (h *checksum) adjust() float64 { return h.deg.Observe(h.now()) }

// rtState describes the rt predicate a Checksum drives, for its page.
func rtState(rt *enqueuepred.ResponseTime) string {
	if rt == nil {
		return "no rt predicate"
	}
	return fmt.Sprintf("p90 %v, target %v, admission control %v", rt.P90().Round(time.Microsecond), rt.Target(), rt.Enabled())
}
