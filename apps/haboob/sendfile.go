package haboob

import (
	"io/fs"
	"strings"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// defaultSendfileMin is CacheMiss's default sendfileMin. Measured (see
// docs/haboob-bench.md "Zero-copy serving (sendfile)"), sendfile costs
// less CPU per request than copying a cached page from about 4 KiB; 16
// KiB keeps the small files of a SPECweb99-like set (most requests) in
// the page cache, answered without a descriptor, and the rest within the
// open-file cache's default 4096 entries.
const defaultSendfileMin = 16 << 10

// sendFile answers req with the file at path (metadata info from
// resolving it) sent with sendfile, through the open-file cache under
// key: an entry still describing the file is used again, else the file is
// opened on asyncFile (open and fstat block) and cached. An answer
// without a body (HEAD, 304, 416) needs no descriptor.
func (h *cacheMiss) sendFile(key, path string, r rep, info fs.FileInfo, anyClient bool, req *http.Request) {
	if resp, _, n := fileResponse(req, info.Size(), repOf(r, info)); n == 0 {
		h.reply(req, resp)
		return
	}
	files := h.cache.files
	if e, ok := files.revalidate(key, info, anyClient, sink.Nanotime()); ok {
		sendFileReply(h.send, fileReply(req, e), h.args.RetryAfter)
		return
	}
	h.mu.Lock()
	if op := h.opening[key]; op != nil {
		op.reqs = append(op.reqs, req)
		h.mu.Unlock()
		return
	}
	op := &fetch{key: key, file: path, rep: r, anyClient: anyClient, reqs: []*http.Request{req}}
	h.opening[key] = op
	h.mu.Unlock()
	if err := h.fio.OpenShared(path, h.self, op); err != nil {
		for _, req := range h.take(h.opening, op) {
			unavailable(req, h.args.RetryAfter)
		}
	}
}

// opened caches a file opened for sendfile and answers the requests that
// waited for it.
func (h *cacheMiss) opened(ev aio.FileOpened) {
	op, ok := ev.Tag.(*fetch)
	if !ok {
		h.log.Warn("haboob: CacheMiss: file opened without a request", "path", ev.Path)
		ev.File.Release()
		return
	}
	reqs := h.take(h.opening, op)
	r := repOf(op.rep, ev.Info)
	e := newOpenFile(op.key, ev.File, ev.Info, r, op.anyClient)
	e = h.cache.files.put(e, sink.Nanotime()) // one reference for the replies
	for i, req := range reqs {
		if i > 0 {
			e.file.Retain()
		}
		sendFileReply(h.send, fileReply(req, e), h.args.RetryAfter)
	}
	if len(reqs) == 0 {
		e.file.Release()
	}
}

// openFailed answers the requests waiting for a file that could not be
// opened.
func (h *cacheMiss) openFailed(ev aio.IOError) {
	op, ok := ev.Tag.(*fetch)
	if !ok {
		h.log.Warn("haboob: CacheMiss: open error without a request", "path", ev.Path, "err", ev.Err)
		return
	}
	resp := errorResponse(h.log, ev.Path, ev.Err)
	for _, req := range h.take(h.opening, op) {
		h.reply(req, resp())
	}
}

// revalidateFile drops an open-file cache entry whose path no longer
// resolves to the same, unchanged file (or whose gzip variant appeared or
// went away).
func (h *cacheMiss) revalidateFile(e *openFile) {
	path, isGzip := strings.CutPrefix(e.key, "gzip:")
	t, err := h.site.recheck(path)
	fresh := err == nil && t.Redirect == ""
	if fresh {
		sib, hasSib := Target{}, false
		if h.gz.static() {
			sib, hasSib = h.site.recheckSibling(t, ".gz")
		}
		switch {
		case isGzip:
			fresh = hasSib && sameFile(e.info, sib.Info)
		default:
			fresh = sameFile(e.info, t.Info) && e.anyClient == (h.gz.kind(e.rep.ctype, t.Info.Size(), h.cacheable(t.Info.Size()), hasSib) == gzipNone)
		}
	}
	if !fresh {
		h.cache.files.removeStale(e.key, e)
	}
}
