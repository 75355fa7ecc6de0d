// Package haboob is the Haboob web server of the SEDA thesis (chapter 6) as a
// graph of Sandstorm stages, wired in YAML (configs/haboob.yaml):
//
// Start with cmd/haboob (go run ./cmd/haboob) and configs/haboob.yaml; to
// embed the server, New a Server, Register its handlers in a
// stage.Registry and load the configuration with it.
//
//   - HttpRecv (haboob.HttpRecv) opens the HTTP server (package http on an
//     aio socket; parsing runs inline where packets are delivered), receives
//     every request and dispatches it by URL: the statistics page, a dynamic
//     handler stage chosen by the longest matching prefix in its `routes`,
//     or the page cache for GET and HEAD (other methods get 405). It also
//     bounds the connections (`maxConnections`: 503, then close) and sets
//     the server's timeouts. With `combine: true` it answers a GET or HEAD
//     whose page is cached and fresh itself, where the request is parsed
//     (the socket's event loop), formatted and ordered by the connection
//     exactly as HttpSend would (the thesis's Combine pattern); misses,
//     pages due for revalidation and everything else take the stages.
//     Such requests are counted as HttpRecv's `requests.inline`.
//   - PageCache (haboob.PageCache) serves hits from the in-memory PageCache,
//     bounded by `maxBytes`, least recently used pages evicted and their
//     buffers reused. Within each batch it serves hits before misses and the
//     shortest pages first (thesis §6.1.1), and passes misses to CacheMiss.
//     A page older than `revalidate` is checked against its file in the
//     background while it goes on being served: the checks that come due
//     within a few milliseconds go to CacheMiss in one hand-off, and a
//     directory's lstat and its listing (whether it holds any .gz file)
//     are shared by the checks of all the files under it for half the
//     period (a directory swapped for a link is seen within 1.5 periods;
//     a miss always lstats every component, so nothing outside the root
//     is ever read). /stats counts them as `revalidate.*`.
//   - CacheMiss (haboob.CacheMiss) maps a path to a file under the document
//     root (Site: index files, directory redirects, nothing outside the
//     root), reads it through asyncFile (aio.FileIO.ReadFile, completions
//     back to this stage), inserts it and answers every request that waited
//     for it. Files from `sendfileMin` (default 16 KiB) and above
//     `maxObject` are not cached: they are opened through asyncFile
//     (FileIO.OpenShared), kept in PageCache's open-file cache (`openFiles`,
//     like nginx's open_file_cache) and sent with sendfile from the OS page
//     cache; over TLS they are read per request instead.
//   - HttpSend (haboob.HttpSend) hands each Reply to its connection, which
//     formats the response inline and sends the responses of a connection
//     in request order.
//   - Dynamic handler stages, here haboob.Checksum: a CPU-bound page whose
//     quality factor an enqueuepred.Degrader lowers while the stage's 90th-percentile
//     response time (read from its rt predicate) exceeds the target, and
//     which switches rt admission control on at the lowest quality (thesis
//     §7.3.4).
//
// Any enqueue a stage refuses (queue full, admission predicate) becomes a
// 503 with Retry-After on that client's connection at once, never a hang.
//
// Static serving follows what users expect of a web server: MIME types,
// index files, redirects for directories, HEAD, conditional GET (ETag,
// If-None-Match, If-Modified-Since → 304), a single byte range (206, 416,
// If-Range), and a document root nothing escapes (.., encoded dots and
// symbolic links leading out get 403 or 404).
//
// Compression (PageCache's `gzip:` args, on by default) follows nginx's
// gzip_static and gzip modules. A client whose Accept-Encoding admits gzip
// (q-values honoured: "gzip;q=0" refuses it, "*" admits it when gzip is
// not named, "x-gzip" is gzip) gets, for a file with a .gz file beside it,
// that file's bytes (gzip_static: the .gz is never checked against the
// file), and for a page of a text type (html, css, js, json, svg, txt, xml;
// `types`) of at least `minLength` bytes (256) that is cached, a copy
// compressed once at `level` (5) by compress/gzip in the PageCache or
// CacheMiss worker that holds the bytes, never on the event loop. The copy
// is a page of its own in the page cache (counted against maxBytes,
// evicted like any other, compressed again only once evicted or stale),
// and /stats counts compressions (`gzip.compressions`). Both variants carry
// Content-Encoding: gzip, Vary: Accept-Encoding and an ETag of their own:
// the file's ETag with "-gzip", strong for a .gz file, weak (W/) for a copy
// compressed on the fly, since another compress/flate version may produce
// other bytes. If-None-Match is compared with the ETag of the variant the
// request selects; HEAD answers a variant's headers (compressing the page
// if its copy is not cached yet, for the length). Range on a .gz file
// selects bytes of the .gz (as nginx's gzip_static); on a copy compressed
// on the fly it is ignored and the whole copy is sent with 200 and no
// Accept-Ranges (as nginx's gzip filter). The identity answer carries
// Vary: Accept-Encoding too when the file has a .gz sibling or a
// compressible type.
//
// Compression does not: compress for a client that does not ask for it;
// compress images, archives or any type outside `types` (a request for a
// .gz file itself gets it as application/gzip, unencoded); compress files
// above CacheMiss's maxObject on the fly (they are streamed uncompressed,
// though a .gz sibling of any size is streamed); compress dynamic pages
// (Checksum) or error pages; offer deflate, br or zstd; or decline
// HTTP/1.0 clients (nginx's gzip_http_version 1.1 does). A .gz sibling
// that appears or goes away is noticed when the cached page is next
// revalidated.
//
// A Server holds what the stages share (the HTTP server, the page cache, the
// site) and registers their factories; Options from Go (the command's -root
// and -addr) win over the stages' args. The owner closes the HTTP server
// with Server.Shutdown before the manager's Shutdown, so that the responses
// in progress finish while the stages still run.
//
// Files below CacheMiss's sendfileMin are read whole and cached; larger
// ones, on a plain connection, are answered with an http.FileBody that the
// connection sends with sendfile from its event loop (a client that does
// not read pins a descriptor and an offset, no buffers), the descriptor
// shared by every response through the open-file cache. Over TLS, files
// up to maxObject are cached and larger ones
// are streamed to each request in chunk-sized pieces read through
// asyncFile, each piece read once the one before it has been written, so
// that memory stays bounded whatever the file size (HEAD and 304 read
// nothing, a byte range reads only its bytes). A connection's streamed
// files are opened in turn, each once the one before it is sent, so that
// a client pipelining many requests holds one open file.
package haboob
