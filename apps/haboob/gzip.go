package haboob

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
)

// gzipArgs are the `gzip:` args of PageCache: compression of static
// pages. The zero value of each field means its default.
type gzipArgs struct {
	// Off turns compression off altogether (default: on).
	Off bool `yaml:"off"`
	// NoStatic stops serving a file's .gz sibling (nginx's gzip_static;
	// default: served).
	NoStatic bool `yaml:"noStatic"`
	// NoDynamic stops compressing text pages on the fly (default: they
	// are compressed, once, and the copy cached).
	NoDynamic bool `yaml:"noDynamic"`
	// MinLength is the smallest file compressed on the fly (default 256
	// bytes): below it the gzip framing costs more than it saves.
	MinLength aio.ByteSize `yaml:"minLength"`
	// Level is the compress/flate level, 1 (fastest) to 9 (smallest);
	// default 5.
	Level int `yaml:"level"`
	// Types lists the media types (without parameters) compressed on the
	// fly; default: text/html, text/css, text/plain, text/xml,
	// text/javascript, application/javascript, application/json,
	// application/xml, image/svg+xml.
	Types []string `yaml:"types"`
}

var defaultGzipTypes = []string{
	"text/html", "text/css", "text/plain", "text/xml", "text/javascript",
	"application/javascript", "application/json", "application/xml", "image/svg+xml",
}

// withDefaults fills in the zero fields and checks the others.
func (a gzipArgs) withDefaults() (gzipArgs, error) {
	if a.MinLength < 0 {
		return a, fmt.Errorf("gzip.minLength must not be negative, got %v", a.MinLength)
	}
	if a.MinLength == 0 {
		a.MinLength = 256
	}
	if a.Level == 0 {
		a.Level = 5
	}
	if a.Level < gzip.BestSpeed || a.Level > gzip.BestCompression {
		return a, fmt.Errorf("gzip.level must be 1 to 9, got %d", a.Level)
	}
	if a.Types == nil {
		a.Types = defaultGzipTypes
	}
	return a, nil
}

// gzipKey is the page-cache key of a path's gzip variant: no request path
// starts with anything but "/", so it never collides with an identity page.
func gzipKey(path string) string { return "gzip:" + path }

// gzipETag is the ETag of a gzip variant: the file's ETag with "-gzip"
// inside the quotes, weak (W/) when the bytes come from compress/flate
// rather than from a file, since another compressor version may produce
// other bytes for the same file (nginx weakens ETags of gzipped
// responses for the same reason).
func gzipETag(etag string, weak bool) string {
	if etag == "" {
		return ""
	}
	e := strings.TrimPrefix(etag, "W/")
	e = strings.TrimSuffix(e, `"`) + `-gzip"`
	if weak || strings.HasPrefix(etag, "W/") {
		return "W/" + e
	}
	return e
}

// gzipKind says what gzip variant an identity page has.
type gzipKind uint8

const (
	gzipNone    gzipKind = iota // none: identity for everyone
	gzipStatic                  // a .gz sibling file (gzip_static)
	gzipDynamic                 // compressed on the fly, once
)

// rep describes a representation of a file: what its responses say about
// it besides the bytes.
type rep struct {
	ctype string
	v     Validators
	// enc is the Content-Encoding ("" for identity).
	enc string
	// vary adds "Vary: Accept-Encoding": a gzip variant exists or may.
	vary bool
	// noRanges ignores Range (a 200 with the whole body): a body
	// compressed on the fly, as nginx does.
	noRanges bool
	// gz is, for an identity page, its gzip variant.
	gz gzipKind
	// src is the ETag of the file the bytes come from (revalidation).
	src string
}

// repOf returns r for a file with metadata info: validators from it, the
// gzip variant's ETag for a .gz file (r.enc == "gzip").
func repOf(r rep, info fs.FileInfo) rep {
	r.src = ETag(info)
	r.v = Validators{ETag: r.src, ModTime: info.ModTime()}
	if r.enc != "" {
		r.v.ETag = gzipETag(r.src, false)
	}
	return r
}

// header returns the fields of a 200 response.
func (r rep) header() http.Header {
	h := make(http.Header, 0, 6)
	if r.ctype != "" {
		h = append(h, http.Field{Name: "Content-Type", Value: r.ctype})
	}
	h = r.encodingFields(h)
	h = validatorFields(h, r.v)
	if !r.noRanges {
		h = append(h, http.Field{Name: "Accept-Ranges", Value: "bytes"})
	}
	return h
}

// encodingFields appends Content-Encoding and Vary as r needs them.
func (r rep) encodingFields(h http.Header) http.Header {
	if r.enc != "" {
		h = append(h, http.Field{Name: "Content-Encoding", Value: r.enc})
	}
	if r.vary {
		h = append(h, http.Field{Name: "Vary", Value: "Accept-Encoding"})
	}
	return h
}

// notModifiedHeader returns the fields of a 304 (RFC 9110 §15.4.5: the
// validators and Vary of the 200 it stands for).
func (r rep) notModifiedHeader() http.Header {
	var h http.Header
	if r.vary {
		h = append(h, http.Field{Name: "Vary", Value: "Accept-Encoding"})
	}
	return validatorFields(h, r.v)
}

// gzipper compresses pages on the fly, each once: the compressed copy is
// a page of its own in the page cache (key gzipKey), counted against the
// cache's bound, so that later requests are served from memory. It runs
// in the stage that holds the bytes (PageCache or CacheMiss), never on the
// socket's event loop.
type gzipper struct {
	args  gzipArgs
	cache *PageCache
	types map[string]bool
	pool  sync.Pool // *gzip.Writer at args.Level

	mu       sync.Mutex
	inflight map[string][]*http.Request // gzip key → requests waiting

	compressions, bytesIn, bytesOut atomic.Uint64
}

func newGzipper(a gzipArgs, cache *PageCache) *gzipper {
	g := &gzipper{args: a, cache: cache, types: map[string]bool{}, inflight: map[string][]*http.Request{}}
	for _, t := range a.Types {
		g.types[strings.ToLower(strings.TrimSpace(t))] = true
	}
	return g
}

// accepts reports whether req is to get a gzip variant, if there is one.
func (g *gzipper) accepts(req *http.Request) bool {
	return g != nil && !g.args.Off && AcceptsGzip(req.Header)
}

// compressible reports whether a page of this type would be compressed
// on the fly (whatever its size).
func (g *gzipper) compressible(ctype string) bool {
	if g == nil || g.args.Off || g.args.NoDynamic {
		return false
	}
	mt, _, _ := strings.Cut(ctype, ";")
	return g.types[strings.ToLower(strings.TrimSpace(mt))]
}

// static reports whether .gz siblings are served.
func (g *gzipper) static() bool { return g != nil && !g.args.Off && !g.args.NoStatic }

// kind decides an identity file's gzip variant: a .gz sibling wins, then
// compression on the fly for a compressible type of at least MinLength
// bytes that is cached (not streamed).
func (g *gzipper) kind(ctype string, size int64, cacheable, sibling bool) gzipKind {
	switch {
	case sibling && g.static():
		return gzipStatic
	case g.compressible(ctype) && size >= int64(g.args.MinLength) && cacheable:
		return gzipDynamic
	}
	return gzipNone
}

// CompressionStats count Haboob's on-the-fly compression.
type CompressionStats struct {
	// Compressions is the number of pages compressed; BytesIn and
	// BytesOut their sizes before and after.
	Compressions, BytesIn, BytesOut uint64
}

func (g *gzipper) stats() CompressionStats {
	if g == nil {
		return CompressionStats{}
	}
	return CompressionStats{Compressions: g.compressions.Load(), BytesIn: g.bytesIn.Load(), BytesOut: g.bytesOut.Load()}
}

// compress returns body gzipped, in a buffer from the cache.
func (g *gzipper) compress(body []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(body)/3 + 64)
	zw, _ := g.pool.Get().(*gzip.Writer)
	if zw == nil {
		zw, _ = gzip.NewWriterLevel(&buf, g.args.Level) // the level was validated
	} else {
		zw.Reset(&buf)
	}
	_, _ = zw.Write(body) // a bytes.Buffer does not fail
	_ = zw.Close()
	g.pool.Put(zw)
	out := g.cache.Buffer(buf.Len())
	copy(out, buf.Bytes())
	g.compressions.Add(1)
	g.bytesIn.Add(uint64(len(body)))
	g.bytesOut.Add(uint64(len(out)))
	return out
}

// serve answers req with the gzip variant of the identity page p (whose
// gz is gzipDynamic), compressing p unless another worker has or is
// doing it: requests arriving meanwhile wait on that compression and are
// answered by the worker that does it. p is released.
func (g *gzipper) serve(req *http.Request, p *Page, reply func(*http.Reply)) {
	key := gzipKey(p.Key)
	g.mu.Lock()
	if waiting, ok := g.inflight[key]; ok {
		g.inflight[key] = append(waiting, req)
		g.mu.Unlock()
		p.Release()
		return
	}
	if q, ok := g.cache.get(key, false); ok {
		g.mu.Unlock()
		p.Release()
		reply(staticReply(req, q))
		return
	}
	g.inflight[key] = []*http.Request{req}
	g.mu.Unlock()

	r := p.rep
	r.enc, r.vary, r.noRanges, r.gz = "gzip", true, true, gzipNone
	r.v.ETag = gzipETag(p.ETag, true)
	q := g.cache.insertRep(key, g.compress(p.Body), r)
	q.checked.Store(p.checked.Load()) // as fresh as the page it was made from
	p.Release()

	g.mu.Lock()
	reqs := g.inflight[key]
	delete(g.inflight, key)
	g.mu.Unlock()
	for _, w := range reqs {
		q.Retain()
		reply(staticReply(w, q))
	}
	q.Release()
}
