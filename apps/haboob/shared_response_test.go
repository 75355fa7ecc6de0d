package haboob_test

import (
	"fmt"
	"io"
	nethttp "net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInlineHitSharedResponse: a cached page's or open file's 200
// response is one value shared, read-only, by every hit's reply (no reply
// object per hit). Run with -race: 8 clients at once ask for a page
// copied into the header's buffer, one written beside it and a file sent
// with sendfile, by GET and HEAD, keep-alive and Connection: close, with
// and without Range and If-None-Match; every answer must be the one
// asked for (status, length, body, Connection), so a reply that changed
// the shared response (a close marked on it, a HEAD's file removed, a
// range's body) shows up in the next ones, and -race reports the write.
func TestInlineHitSharedResponse(t *testing.T) {
	s := startInlineHitSite(t)
	bodies := map[string]string{"/page.txt": "0123456789", "/mid.txt": strings.Repeat("m", 3000), "/big.bin": bigFile}
	type ask struct {
		method, path string
		close        bool
		rangeFirst   int // a Range of bytes first-(first+1); -1: none
		etag         bool
	}
	var asks []ask
	for path := range bodies {
		for _, method := range []string{"GET", "HEAD"} {
			for _, closing := range []bool{false, true} {
				asks = append(asks, ask{method, path, closing, -1, false}, ask{method, path, closing, 2, false}, ask{method, path, closing, -1, true})
			}
		}
	}
	client := func() *nethttp.Client {
		return &nethttp.Client{Timeout: time.Minute, Transport: &nethttp.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}} // a hang guard only
	}
	etags := map[string]string{}
	for path := range bodies { // misses first: cached, and each one's ETag
		resp, err := client().Get("http://" + s.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		etags[path] = resp.Header.Get("ETag")
	}
	check := func(c *nethttp.Client, a ask) error {
		req, _ := nethttp.NewRequest(a.method, "http://"+s.addr+a.path, nil)
		req.Close = a.close
		want, status := bodies[a.path], 200
		if a.rangeFirst >= 0 && a.method == "GET" {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", a.rangeFirst, a.rangeFirst+1))
			want, status = want[a.rangeFirst:a.rangeFirst+2], 206
		}
		if a.etag {
			req.Header.Set("If-None-Match", etags[a.path])
			want, status = "", 304
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if a.method == "HEAD" {
			want = ""
		}
		if resp.StatusCode != status || string(got) != want || resp.Close != a.close {
			return fmt.Errorf("%+v: status %d, %d bytes, close %v; want %d, %d bytes, close %v", a, resp.StatusCode, len(got), resp.Close, status, len(want), a.close)
		}
		if n := resp.Header.Get("Content-Length"); status == 200 && n != strconv.Itoa(len(bodies[a.path])) {
			return fmt.Errorf("%+v: Content-Length %s, want %d", a, n, len(bodies[a.path]))
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client()
			for i := range 4 * len(asks) {
				if err := check(c, asks[(i*7+g)%len(asks)]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
