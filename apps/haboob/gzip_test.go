package haboob_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	nethttp "net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/stage"
)

// textPage is a compressible page above gzip.minLength and below the test
// configuration's maxObject (4 KiB): compressed on the fly.
var textPage = "<!doctype html><title>t</title>\n" + strings.Repeat("<p>Haboob serves this paragraph, compressed once.</p>\n", 50)

// scriptJS has a .gz sibling (gzip_static).
var scriptJS = "function hello() {\n" + strings.Repeat("  console.log('hello, gzip_static');\n", 40) + "}\n"

func gzipBytes(t *testing.T, s string, level int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write([]byte(s))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gunzip(t *testing.T, b string) string {
	t.Helper()
	zr, err := gzip.NewReader(strings.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("bad gzip: %v", err)
	}
	return string(out)
}

// startGzipSite starts Haboob with a text page, a script with a .gz
// sibling (made at best compression, so that its bytes differ from what
// the server would make), a small stylesheet and an image.
func startGzipSite(t *testing.T, config string) (*site, []byte) {
	t.Helper()
	s := startHaboob(t, config)
	write(t, filepath.Join(s.root, "page.html"), textPage)
	write(t, filepath.Join(s.root, "app.js"), scriptJS)
	gz := gzipBytes(t, scriptJS, gzip.BestCompression)
	write(t, filepath.Join(s.root, "app.js.gz"), string(gz))
	return s, gz
}

// rawClient does not ask for gzip nor decompress: the test sets
// Accept-Encoding itself and sees the bytes sent.
func (s *site) rawClient(t *testing.T) *nethttp.Client {
	tr := &nethttp.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &nethttp.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestGzipStatic(t *testing.T) {
	s, gz := startGzipSite(t, testConfig)
	c := s.rawClient(t)
	idResp, idBody := s.do(t, c, "GET", "/app.js")
	if idBody != scriptJS || idResp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("identity: encoding %q, body %d bytes", idResp.Header.Get("Content-Encoding"), len(idBody))
	}
	if idResp.Header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("identity with a .gz sibling: Vary %q", idResp.Header.Get("Vary"))
	}
	idTag := idResp.Header.Get("ETag")
	for round := range 3 { // CacheMiss, then the page cache (and Combine)
		resp, body := s.do(t, c, "GET", "/app.js", "Accept-Encoding", "gzip, deflate, br")
		if resp.StatusCode != 200 || body != string(gz) {
			t.Fatalf("round %d: %d, %d bytes, want the .gz file's %d", round, resp.StatusCode, len(body), len(gz))
		}
		h := resp.Header
		if h.Get("Content-Encoding") != "gzip" || h.Get("Vary") != "Accept-Encoding" ||
			h.Get("Content-Type") != "text/javascript; charset=utf-8" || h.Get("Content-Length") != strconv.Itoa(len(gz)) {
			t.Fatalf("round %d: headers %v", round, h)
		}
		tag := h.Get("ETag")
		if tag == "" || tag == idTag || strings.HasPrefix(tag, "W/") {
			t.Fatalf("gzip_static ETag %q (identity %q): want a strong, distinct one", tag, idTag)
		}
		if gunzip(t, body) != scriptJS {
			t.Fatal("the .gz does not decompress to the file")
		}
	}
	// gzip_static serves ranges of the .gz file, as nginx does.
	resp, body := s.do(t, c, "GET", "/app.js", "Accept-Encoding", "gzip", "Range", "bytes=0-9")
	if resp.StatusCode != 206 || body != string(gz[:10]) || resp.Header.Get("Content-Encoding") != "gzip" ||
		resp.Header.Get("Content-Range") != "bytes 0-9/"+strconv.Itoa(len(gz)) {
		t.Errorf("range of the .gz: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if s.hb.Compression().Compressions != 0 {
		t.Errorf("a .gz sibling was compressed again: %+v", s.hb.Compression())
	}
}

func TestGzipOnTheFly(t *testing.T) {
	s, _ := startGzipSite(t, testConfig)
	c := s.rawClient(t)
	var gzTag, gzBody string
	for round := range 4 {
		resp, body := s.do(t, c, "GET", "/page.html", "Accept-Encoding", "gzip")
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Content-Encoding") != "gzip" || h.Get("Vary") != "Accept-Encoding" ||
			h.Get("Content-Type") != "text/html; charset=utf-8" || h.Get("Accept-Ranges") != "" {
			t.Fatalf("round %d: %d %v", round, resp.StatusCode, h)
		}
		if got := gunzip(t, body); got != textPage {
			t.Fatalf("round %d: decompressed to %d bytes, want the page's %d", round, len(got), len(textPage))
		}
		if len(body) >= len(textPage) || h.Get("Content-Length") != strconv.Itoa(len(body)) {
			t.Fatalf("round %d: %d compressed bytes, Content-Length %q", round, len(body), h.Get("Content-Length"))
		}
		if round > 0 && (body != gzBody || h.Get("ETag") != gzTag) {
			t.Fatalf("round %d: another body or ETag than the cached copy's", round)
		}
		gzTag, gzBody = h.Get("ETag"), body
	}
	if n := s.hb.Compression().Compressions; n != 1 {
		t.Fatalf("compressions = %d after 4 requests, want 1 (the copy is cached)", n)
	}
	idResp, idBody := s.do(t, c, "GET", "/page.html")
	idTag := idResp.Header.Get("ETag")
	if idBody != textPage || idResp.Header.Get("Content-Encoding") != "" || idResp.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("identity: %d bytes, %v", len(idBody), idResp.Header)
	}
	if !strings.HasPrefix(gzTag, "W/") || gzTag == idTag || strings.TrimPrefix(gzTag, "W/") == idTag {
		t.Errorf("on-the-fly ETag %q (identity %q): want a weak, distinct one", gzTag, idTag)
	}
	// Range is ignored for a body compressed on the fly (nginx: 200 with
	// the whole compressed body); the identity page honours it.
	resp, body := s.do(t, c, "GET", "/page.html", "Accept-Encoding", "gzip", "Range", "bytes=0-9")
	if resp.StatusCode != 200 || body != gzBody {
		t.Errorf("Range on the gzip copy: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp, body = s.do(t, c, "GET", "/page.html", "Range", "bytes=0-9")
	if resp.StatusCode != 206 || body != textPage[:10] {
		t.Errorf("Range on identity: %d %q", resp.StatusCode, body)
	}
	// HEAD: the headers of the GET, for each variant.
	resp, body = s.do(t, c, "HEAD", "/page.html", "Accept-Encoding", "gzip")
	if body != "" || resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("ETag") != gzTag ||
		resp.Header.Get("Content-Length") != strconv.Itoa(len(gzBody)) {
		t.Errorf("HEAD gzip: %q %v", body, resp.Header)
	}
	resp, _ = s.do(t, c, "HEAD", "/page.html")
	if resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Length") != strconv.Itoa(len(textPage)) {
		t.Errorf("HEAD identity: %v", resp.Header)
	}
	if n := s.hb.Compression().Compressions; n != 1 {
		t.Errorf("compressions = %d, want 1", n)
	}
	if st := s.hb.Cache().Stats(); st.Pages < 2 || st.Bytes < int64(len(textPage)+len(gzBody)) {
		t.Errorf("the gzip copy is not a cache page of its own: %+v", st)
	}
}

func TestGzipConditionalPerVariant(t *testing.T) {
	s, _ := startGzipSite(t, testConfig)
	c := s.rawClient(t)
	for _, path := range []string{"/page.html", "/app.js"} { // on the fly, gzip_static
		t.Run(path, func(t *testing.T) {
			gzResp, _ := s.do(t, c, "GET", path, "Accept-Encoding", "gzip")
			idResp, _ := s.do(t, c, "GET", path)
			gzTag, idTag := gzResp.Header.Get("ETag"), idResp.Header.Get("ETag")
			tests := []struct {
				name, ae, inm string
				status        int
			}{
				{"gzip tag, gzip client", "gzip", gzTag, 304},
				{"identity tag, identity client", "", idTag, 304},
				{"identity tag, gzip client", "gzip", idTag, 200},
				{"gzip tag, identity client", "", gzTag, 200},
				{"both tags, gzip client", "gzip", idTag + ", " + gzTag, 304},
			}
			for _, tt := range tests {
				for _, method := range []string{"GET", "HEAD"} {
					hdr := []string{"If-None-Match", tt.inm}
					if tt.ae != "" {
						hdr = append(hdr, "Accept-Encoding", tt.ae)
					}
					resp, _ := s.do(t, c, method, path, hdr...)
					if resp.StatusCode != tt.status {
						t.Errorf("%s %s: %d, want %d", method, tt.name, resp.StatusCode, tt.status)
					}
					if tt.status == 304 {
						want := idTag
						if tt.ae != "" {
							want = gzTag
						}
						if resp.Header.Get("ETag") != want || resp.Header.Get("Vary") != "Accept-Encoding" {
							t.Errorf("%s %s: 304 with ETag %q Vary %q, want %q", method, tt.name, resp.Header.Get("ETag"), resp.Header.Get("Vary"), want)
						}
					}
				}
			}
		})
	}
}

func TestGzipOnlyWhenAsked(t *testing.T) {
	s, _ := startGzipSite(t, testConfig)
	c := s.rawClient(t)
	tests := []struct {
		name, path, ae string
		encoding, vary string
	}{
		{"no Accept-Encoding", "/page.html", "", "", "Accept-Encoding"},
		{"gzip;q=0", "/page.html", "gzip;q=0, deflate", "", "Accept-Encoding"},
		{"gzip;q=0 beats *", "/page.html", "*, gzip;q=0", "", "Accept-Encoding"},
		{"identity only", "/page.html", "identity", "", "Accept-Encoding"},
		{"br only", "/app.js", "br", "", "Accept-Encoding"},
		{"*", "/page.html", "*", "gzip", "Accept-Encoding"},
		{"q=0.001", "/app.js", "gzip;q=0.001", "gzip", "Accept-Encoding"},
		{"x-gzip", "/page.html", "x-gzip", "gzip", "Accept-Encoding"},
		{"below minLength", "/style.css", "gzip", "", "Accept-Encoding"},
		{"image", "/img/dot.png", "gzip", "", ""},
		{"octet stream above maxObject", "/big.bin", "gzip", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // cold and cached
				var hdr []string
				if tt.ae != "" {
					hdr = []string{"Accept-Encoding", tt.ae}
				}
				resp, body := s.do(t, c, "GET", tt.path, hdr...)
				if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != tt.encoding || resp.Header.Get("Vary") != tt.vary {
					t.Fatalf("%d, Content-Encoding %q, Vary %q; want %q, %q", resp.StatusCode,
						resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), tt.encoding, tt.vary)
				}
				if tt.encoding == "gzip" {
					body = gunzip(t, body)
				}
				if tt.path == "/page.html" && body != textPage || tt.path == "/app.js" && body != scriptJS {
					t.Fatalf("body differs: %d bytes", len(body))
				}
			}
		})
	}
}

// The stats page counts compressions.
func TestGzipStatsLine(t *testing.T) {
	s, _ := startGzipSite(t, testConfig)
	s.do(t, s.rawClient(t), "GET", "/page.html", "Accept-Encoding", "gzip")
	_, body := s.raw(t, "/stats")
	if !strings.Contains(body, "\ngzip.compressions 1\n") {
		t.Errorf("/stats lacks gzip.compressions 1:\n%s", body)
	}
}

func TestGzipOff(t *testing.T) {
	cfg := strings.Replace(testConfig, "args: {maxBytes: 1MiB, revalidate: 20ms}", "args: {maxBytes: 1MiB, revalidate: 20ms, gzip: {off: true}}", 1)
	s, _ := startGzipSite(t, cfg)
	c := s.rawClient(t)
	for _, path := range []string{"/page.html", "/app.js"} {
		resp, _ := s.do(t, c, "GET", path, "Accept-Encoding", "gzip")
		if resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Vary") != "" {
			t.Errorf("%s with gzip off: %v", path, resp.Header)
		}
	}
}

func TestGzipConfigErrors(t *testing.T) {
	for _, args := range []string{"gzip: {level: 10}", "gzip: {minLength: -1}", "gzip: {levle: 3}"} {
		cfg := strings.Replace(testConfig, "args: {maxBytes: 1MiB, revalidate: 20ms}", "args: {maxBytes: 1MiB, "+args+"}", 1)
		err := startErr(t, cfg)
		if err == nil || !strings.Contains(err.Error(), "gzip") && !strings.Contains(err.Error(), "levle") {
			t.Errorf("%s: err = %v", args, err)
		}
	}
}

// curl --compressed asks for gzip and decompresses: it must get the page.
func TestGzipCurlCompatible(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	s, _ := startGzipSite(t, testConfig)
	for _, path := range []string{"/page.html", "/app.js"} {
		for round := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, err := exec.CommandContext(ctx, curl, "--compressed", "-s", "-D", "-", "http://"+s.addr+path).Output()
			cancel()
			if err != nil {
				t.Fatalf("curl %s: %v", path, err)
			}
			head, body, _ := strings.Cut(string(out), "\r\n\r\n")
			want := textPage
			if path == "/app.js" {
				want = scriptJS
			}
			if !strings.Contains(strings.ToLower(head), "content-encoding: gzip") {
				t.Errorf("curl %s (round %d): not compressed:\n%s", path, round, head)
			}
			if body != want {
				t.Errorf("curl %s (round %d): %d bytes, want %d", path, round, len(body), len(want))
			}
		}
	}
}

// startErr starts Haboob on config, expecting it to fail, and returns the
// error (stopping what started if it did not fail).
func startErr(t *testing.T, config string) error {
	t.Helper()
	hb := haboob.New(haboob.Options{Root: t.TempDir()})
	reg := stage.NewRegistry()
	hb.Register(reg)
	m, err := stage.Parse([]byte(config), reg)
	if err == nil {
		if err = m.Start(context.Background()); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = hb.Shutdown(ctx)
			_ = m.Shutdown(ctx)
			cancel()
		}
	}
	_ = hb.Close()
	return err
}

// A .gz sibling above maxObject is streamed like any large file: its
// headers, ranges of its bytes, HEAD and 304 without reading it.
func TestGzipStaticStreamed(t *testing.T) {
	s, _ := startGzipSite(t, testConfig)
	big := strings.Repeat("streamed text, stored rather than compressed\n", 400) // ~18 KiB
	gz := gzipBytes(t, big, gzip.NoCompression)                                  // above maxObject (4 KiB)
	write(t, filepath.Join(s.root, "big.txt"), big)
	write(t, filepath.Join(s.root, "big.txt.gz"), string(gz))
	c := s.rawClient(t)
	resp, body := s.do(t, c, "GET", "/big.txt", "Accept-Encoding", "gzip")
	if resp.StatusCode != 200 || body != string(gz) || resp.Header.Get("Content-Encoding") != "gzip" ||
		resp.Header.Get("Vary") != "Accept-Encoding" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("streamed .gz: %d, %d bytes, %v", resp.StatusCode, len(body), resp.Header)
	}
	tag := resp.Header.Get("ETag")
	resp, body = s.do(t, c, "GET", "/big.txt", "Accept-Encoding", "gzip", "Range", "bytes=-10")
	if resp.StatusCode != 206 || body != string(gz[len(gz)-10:]) || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("range of a streamed .gz: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = s.do(t, c, "GET", "/big.txt", "Accept-Encoding", "gzip", "If-None-Match", tag)
	if resp.StatusCode != 304 || resp.Header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("304 of a streamed .gz: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body = s.do(t, c, "GET", "/big.txt")
	if body != big || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("identity of a streamed file: %d bytes, %v", len(body), resp.Header)
	}
	if n := s.hb.Compression().Compressions; n != 0 {
		t.Errorf("compressions = %d, want 0", n)
	}
}

// A .gz sibling that appears after the page was cached is served once the
// page is revalidated (20ms in the test configuration), and the copy
// compressed on the fly is dropped when its file changes.
func TestGzipRevalidated(t *testing.T) {
	s, _ := startGzipSite(t, testConfig)
	c := s.rawClient(t)
	resp, _ := s.do(t, c, "GET", "/page.html", "Accept-Encoding", "gzip")
	oldTag := resp.Header.Get("ETag")
	gz := gzipBytes(t, textPage, gzip.BestCompression)
	write(t, filepath.Join(s.root, "page.html.gz"), string(gz))
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, body := s.do(t, c, "GET", "/page.html", "Accept-Encoding", "gzip")
		if body == string(gz) {
			if resp.Header.Get("ETag") == oldTag || strings.HasPrefix(resp.Header.Get("ETag"), "W/") {
				t.Errorf("the .gz is served with the on-the-fly ETag %q", resp.Header.Get("ETag"))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new .gz sibling is never served")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Changed: the page and its variants are read again.
	changed := strings.Replace(textPage, "<title>t</title>", "<title>changed</title>", 1)
	write(t, filepath.Join(s.root, "about.html"), changed)
	resp, body := s.do(t, c, "GET", "/about.html", "Accept-Encoding", "gzip")
	if gunzip(t, body) != changed {
		t.Fatal("about.html")
	}
	first := resp.Header.Get("ETag")
	time.Sleep(1100 * time.Millisecond) // another modification time, whatever the file system's granularity
	write(t, filepath.Join(s.root, "about.html"), textPage)
	for {
		resp, body := s.do(t, c, "GET", "/about.html", "Accept-Encoding", "gzip")
		if gunzip(t, body) == textPage {
			if resp.Header.Get("ETag") == first {
				t.Error("the new copy has the old ETag")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the changed file's old compressed copy is served for good")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Many gzip clients asking for a cold page at once get it compressed
// once: the requests that arrive while it is compressed wait for it.
func TestGzipCompressedOnceUnderConcurrency(t *testing.T) {
	s, _ := startGzipSite(t, testConfig)
	var pages []string
	for i := range 8 {
		name := "/c" + strconv.Itoa(i) + ".html"
		write(t, filepath.Join(s.root, name), textPage)
		pages = append(pages, name)
	}
	c := s.rawClient(t)
	errs := make(chan string, 8*16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range pages {
				req, _ := nethttp.NewRequest("GET", "http://"+s.addr+p, nil)
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := c.Do(req)
				if err != nil {
					errs <- err.Error()
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Header.Get("Content-Encoding") != "gzip" {
					errs <- p + ": not compressed"
					continue
				}
				zr, err := gzip.NewReader(bytes.NewReader(b))
				if err != nil {
					errs <- p + ": " + err.Error()
					continue
				}
				if out, err := io.ReadAll(zr); err != nil || string(out) != textPage {
					errs <- p + ": wrong body"
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := s.hb.Compression().Compressions; n != uint64(len(pages)) {
		t.Errorf("compressions = %d for %d pages, want one each", n, len(pages))
	}
}
