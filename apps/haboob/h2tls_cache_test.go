package haboob_test

import (
	"bytes"
	"crypto/tls"
	nethttp "net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestHTTP2OverTLSCachesFilesUpToMaxObject: over h2 on TLS, where every
// byte is copied to be encrypted, files up to maxObject are answered from
// the page cache (read once, no pread per answer) whatever sendfileMin
// says, and only a file above maxObject is sent from the open-file cache.
func TestHTTP2OverTLSCachesFilesUpToMaxObject(t *testing.T) {
	s, roots, files := startH2Files(t)
	h2tls := &nethttp.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: time.Minute}
	defer func() {
		h2tls.CloseIdleConnections()
		waitConnsClosed(t, s)
	}()
	url := "https://" + s.hb.TLSAddr().String()
	cases := []struct {
		path      string
		openFiles int // open-file cache entries after it
	}{
		{"/edge.bin", 0}, // at sendfileMin
		{"/mid.bin", 0},
		{"/large.bin", 1}, // above maxObject
	}
	for _, tc := range cases {
		for range 3 {
			a := fetch(t, h2tls, "GET", url+tc.path, 2)
			if !bytes.Equal(a.body, files[tc.path]) {
				t.Fatalf("%s: %d bytes, not the file's %d", tc.path, len(a.body), len(files[tc.path]))
			}
		}
		if st := s.hb.Cache().Stats(); st.OpenFiles != tc.openFiles {
			t.Fatalf("after %s: %d open files, want %d (%+v)", tc.path, st.OpenFiles, tc.openFiles, st)
		}
	}
	if st := s.hb.Cache().Stats(); st.Hits < 4 {
		t.Fatalf("the files up to maxObject were not answered from the page cache: %+v", st)
	}
}
