package haboob

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Errors of path resolution; each maps to a status (see statusOf).
var (
	ErrNotFound    = errors.New("haboob: not found")
	ErrOutsideRoot = errors.New("haboob: path escapes the document root")
)

// Site maps request paths to files under a document root, the way users of a
// static web server expect: index files for directories, a redirect from a
// directory path without its trailing slash, and nothing outside the root
// (no "..", no encoded dots, no symbolic links that lead out).
type Site struct {
	root  string // absolute, symlinks resolved
	index []string
	// checks are the directory checks revalidations share (see
	// dirChecks); a Site reuses none until CacheMiss sets their period.
	checks *dirChecks
}

// SiteConfig configures a Site.
type SiteConfig struct {
	Root  string   // document root (required)
	Index []string // index files tried for a directory (nil → index.html, index.htm)
}

// NewSite returns a Site for cfg.Root, which must be an existing directory.
func NewSite(cfg SiteConfig) (*Site, error) {
	if cfg.Root == "" {
		return nil, fmt.Errorf("haboob: empty document root")
	}
	abs, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("haboob: document root: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("haboob: document root: %w", err)
	}
	info, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("haboob: document root: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("haboob: document root %s: not a directory", cfg.Root)
	}
	idx := cfg.Index
	if idx == nil {
		idx = []string{"index.html", "index.htm"}
	}
	return &Site{root: real, index: idx, checks: newDirChecks(sink.Nanotime)}, nil
}

// Root returns the resolved document root.
func (s *Site) Root() string { return s.root }

// Target is what a request path resolves to.
type Target struct {
	File     string      // file system path of the file to serve
	Info     fs.FileInfo // its metadata
	Redirect string      // non-empty: answer 301 to this location instead
}

// Resolve maps a cleaned request path (http.Request.Path) to a file.
func (s *Site) Resolve(urlPath string) (Target, error) {
	return s.resolve(urlPath, false)
}

// recheck is Resolve for a revalidation: the directories on the way are
// taken as checked if one was within the reuse period (see dirChecks).
// Only a file read from inside the root, when it was resolved by Resolve,
// is ever checked so.
func (s *Site) recheck(urlPath string) (Target, error) {
	return s.resolve(urlPath, true)
}

// resolve is Resolve; with reuse, recheck.
func (s *Site) resolve(urlPath string, reuse bool) (Target, error) {
	if urlPath == "" || urlPath[0] != '/' || strings.ContainsAny(urlPath, "\x00\\") {
		return Target{}, ErrNotFound
	}
	clean := path.Clean(urlPath)
	for seg := range strings.SplitSeq(clean, "/") {
		if seg == ".." {
			return Target{}, ErrOutsideRoot
		}
	}
	file := filepath.Join(s.root, filepath.FromSlash(clean))
	real, info, err := s.realPath(file, reuse)
	if err != nil {
		if clientPathError(err, file) {
			return Target{}, ErrNotFound
		}
		return Target{}, fmt.Errorf("haboob: resolve %s: %w", urlPath, err)
	}
	if !within(s.root, real) {
		return Target{}, ErrOutsideRoot
	}
	if info == nil {
		if info, err = os.Stat(real); err != nil {
			return Target{}, ErrNotFound
		}
	}
	if info.IsDir() {
		if !strings.HasSuffix(urlPath, "/") {
			return Target{Redirect: escapePath(clean + "/")}, nil
		}
		for _, name := range s.index {
			t, err := s.resolve(path.Join(clean, name), reuse)
			if err == nil && t.Redirect == "" && t.Info.Mode().IsRegular() {
				return t, nil
			}
		}
		return Target{}, ErrNotFound // no directory listings
	}
	if !info.Mode().IsRegular() || strings.HasSuffix(urlPath, "/") {
		// A file named as a directory (/small.txt/) is not found, as
		// open(2) says (ENOTDIR) and nginx answers.
		return Target{}, ErrNotFound
	}
	return Target{File: real, Info: info}, nil
}

// Sibling returns the regular file named t's file plus ext ("index.html"
// → "index.html.gz"), if there is one under the document root.
func (s *Site) Sibling(t Target, ext string) (Target, bool) {
	if t.File == "" {
		return Target{}, false
	}
	return s.sibling(t, ext)
}

// recheckSibling is Sibling for a revalidation: none, without an lstat,
// if a listing of t's directory within the reuse period had no name
// ending in ext (see dirChecks).
func (s *Site) recheckSibling(t Target, ext string) (Target, bool) {
	if t.File == "" || s.checks.noSibling(filepath.Dir(t.File), ext, s.checks.now()) {
		return Target{}, false
	}
	return s.sibling(t, ext)
}

func (s *Site) sibling(t Target, ext string) (Target, bool) {
	// t.File is a real path (on a recheck, as of its directories' last
	// checks, up to half a period old: a recheck's target is only
	// compared with the cached entry, never read): only the sibling
	// itself may be a link.
	name := t.File + ext
	info, err := s.checks.lstat(name)
	if err != nil {
		return Target{}, false
	}
	real := name
	if info.Mode()&fs.ModeSymlink != 0 {
		if real, err = filepath.EvalSymlinks(name); err != nil || !within(s.root, real) {
			return Target{}, false
		}
		if info, err = os.Stat(real); err != nil {
			return Target{}, false
		}
	}
	if !info.Mode().IsRegular() {
		return Target{}, false
	}
	return Target{File: real, Info: info}, true
}

// realPath resolves file, a path under the (real) document root, to a
// path without symbolic links. It lstats each component below the root,
// one system call each, and when none is a link, file is its own real
// path and info the last component's metadata; otherwise it leaves the
// resolution to filepath.EvalSymlinks (which lstats every component from
// "/" again) and info is nil. Resolving a cached page's path again every
// revalidation period is what this keeps cheap: two lstats for
// /dir/file instead of one per component of the root as well. With
// reuse (a revalidation), a directory component found a directory within
// the reuse period is not lstat'ed again (see dirChecks).
func (s *Site) realPath(file string, reuse bool) (real string, info fs.FileInfo, err error) {
	if file == s.root {
		return file, nil, nil
	}
	rest, ok := strings.CutPrefix(file, s.root+string(filepath.Separator))
	if !ok {
		// The root is "/" (its own separator): every path is below it.
		rest, ok = strings.CutPrefix(file, s.root)
	}
	if !ok {
		real, err = filepath.EvalSymlinks(file)
		return real, nil, err
	}
	for i := 0; ; {
		j := strings.IndexByte(rest[i:], filepath.Separator)
		end := len(rest)
		if j >= 0 {
			end = i + j
		}
		component := file[:len(file)-len(rest)+end]
		if reuse && j >= 0 {
			now := s.checks.now()
			if s.checks.isDir(component, now) {
				s.checks.reused.Add(1)
				i = end + 1
				continue
			}
			s.checks.lstats.Add(1)
			if info, err = s.checks.lstat(component); err == nil && info.IsDir() {
				s.checks.update(component, func(c *dirCheck) { c.isDir = now })
			}
		} else {
			if reuse {
				s.checks.lstats.Add(1)
			}
			info, err = s.checks.lstat(component)
		}
		if err != nil {
			return "", nil, err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			real, err = filepath.EvalSymlinks(file)
			return real, nil, err
		}
		if j < 0 {
			return file, info, nil
		}
		i = end + 1
	}
}

// clientPathError reports whether resolving file failed because of what the
// client asked for rather than a fault of the server: a name that does not
// exist, a file used as a directory (/small.txt/x: ENOTDIR), a name too
// long (ENAMETOOLONG), or a symbolic-link loop (ELOOP; EvalSymlinks says
// "too many links" without an errno, so the loop is confirmed with Stat).
// Such a path is not found (nginx answers 404 too, and 403 for a loop);
// nothing is logged.
func clientPathError(err error, file string) bool {
	pathErr := func(err error) bool {
		return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) ||
			errors.Is(err, syscall.ENAMETOOLONG) || errors.Is(err, syscall.ELOOP)
	}
	if pathErr(err) {
		return true
	}
	_, serr := os.Stat(file)
	return serr != nil && pathErr(serr)
}

func within(root, p string) bool {
	if p == root {
		return true
	}
	return strings.HasPrefix(p, root+string(filepath.Separator))
}

// escapePath percent-encodes a path for a Location header.
func escapePath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' || c == '-' || c == '_' || c == '.' || c == '~' ||
			('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// ContentType returns the MIME type for a file name.
func ContentType(name string) string {
	ext := strings.ToLower(filepath.Ext(name))
	switch ext {
	case ".html", ".htm":
		return "text/html; charset=utf-8"
	case ".txt":
		return "text/plain; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".json":
		return "application/json"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".gif":
		return "image/gif"
	case ".ico":
		return "image/x-icon"
	case ".wasm":
		return "application/wasm"
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	return "application/octet-stream"
}

// ETag returns a strong validator for a file version.
func ETag(info fs.FileInfo) string {
	return `"` + strconv.FormatInt(info.ModTime().UnixNano(), 36) + "-" + strconv.FormatInt(info.Size(), 36) + `"`
}

// Validators are a representation's ETag and modification time.
type Validators struct {
	ETag    string
	ModTime time.Time
}

// NotModified reports whether a conditional GET/HEAD can be answered 304:
// If-None-Match takes precedence over If-Modified-Since (RFC 9110 §13.2.2).
// If-Modified-Since is ignored when it is not a valid HTTP date (any of the
// three formats) or is later than the server's current time (RFC 9110
// §13.1.3).
func NotModified(req *http.Request, v Validators) bool {
	if inm, ok := req.Header.Lookup("If-None-Match"); ok {
		return etagListMatches(inm, v.ETag, true)
	}
	ims, ok := req.Header.Lookup("If-Modified-Since")
	if !ok || v.ModTime.IsZero() {
		return false
	}
	t, err := http.ParseTime(ims)
	if err != nil || t.After(time.Now()) {
		return false
	}
	return !v.ModTime.Truncate(time.Second).After(t)
}

// etagListMatches compares an If-None-Match / If-Range style list with etag;
// weak comparison ignores W/ prefixes.
func etagListMatches(list, etag string, weak bool) bool {
	if strings.TrimSpace(list) == "*" {
		return true
	}
	strip := func(s string) string {
		s = strings.TrimSpace(s)
		if weak {
			s = strings.TrimPrefix(s, "W/")
		}
		return s
	}
	want := strip(etag)
	for _, cand := range strings.Split(list, ",") {
		if c := strip(cand); c != "" && c == want {
			return true
		}
	}
	return false
}

// ByteRange is an inclusive byte range First..Last of a representation.
type ByteRange struct{ First, Last int64 }

// Length is the number of bytes in the range.
func (r ByteRange) Length() int64 { return r.Last - r.First + 1 }

// ErrUnsatisfiable means a Range header asked for no byte of the
// representation: the answer is 416.
var ErrUnsatisfiable = errors.New("haboob: range not satisfiable")

// ParseRange interprets a request's Range header for a representation of
// size bytes. ok is false when the whole representation should be sent (no
// Range, a syntax error, several ranges, or an If-Range that does not
// match); ErrUnsatisfiable when no requested byte exists.
func ParseRange(req *http.Request, size int64, v Validators) (r ByteRange, ok bool, err error) {
	spec, has := req.Header.Lookup("Range")
	if !has {
		return ByteRange{}, false, nil
	}
	if ir, has := req.Header.Lookup("If-Range"); has {
		if strings.HasPrefix(strings.TrimSpace(ir), `"`) || strings.HasPrefix(strings.TrimSpace(ir), "W/") {
			if !etagListMatches(ir, v.ETag, false) || strings.HasPrefix(strings.TrimSpace(ir), "W/") {
				return ByteRange{}, false, nil
			}
		} else if t, perr := http.ParseTime(ir); perr != nil || !v.ModTime.Truncate(time.Second).Equal(t) {
			return ByteRange{}, false, nil
		}
	}
	unit, set, found := strings.Cut(spec, "=")
	if !found || strings.TrimSpace(strings.ToLower(unit)) != "bytes" || strings.Contains(set, ",") {
		return ByteRange{}, false, nil // ignoring Range is always allowed
	}
	first, last, found := strings.Cut(strings.TrimSpace(set), "-")
	if !found {
		return ByteRange{}, false, nil
	}
	first, last = strings.TrimSpace(first), strings.TrimSpace(last)
	switch {
	case first == "" && last == "":
		return ByteRange{}, false, nil
	case first == "": // suffix: the last n bytes
		n, perr := strconv.ParseInt(last, 10, 64)
		if perr != nil || n < 0 {
			return ByteRange{}, false, nil
		}
		if n == 0 || size == 0 {
			return ByteRange{}, false, ErrUnsatisfiable
		}
		return ByteRange{First: max(size-n, 0), Last: size - 1}, true, nil
	default:
		f, perr := strconv.ParseInt(first, 10, 64)
		if perr != nil || f < 0 {
			return ByteRange{}, false, nil
		}
		l := size - 1
		if last != "" {
			l, perr = strconv.ParseInt(last, 10, 64)
			if perr != nil || l < f {
				return ByteRange{}, false, nil
			}
		}
		if f >= size {
			return ByteRange{}, false, ErrUnsatisfiable
		}
		return ByteRange{First: f, Last: min(l, size-1)}, true, nil
	}
}
