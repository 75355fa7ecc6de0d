package haboob_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sendfileConfig sends every file above 4 KiB with sendfile and keeps its
// descriptor valid for 20ms.
var sendfileConfig = strings.NewReplacer(
	"args: {maxBytes: 1MiB, revalidate: 20ms}", "args: {maxBytes: 1MiB, revalidate: 20ms, openFiles: {valid: 20ms}}",
	"args: {maxObject: 4KiB}", "args: {maxObject: 1MiB, sendfileMin: 4KiB}",
).Replace(testConfig)

// A file sent from the open-file cache is served from a new descriptor
// once it is changed in place, replaced by another file (rename) or
// removed (404): the cache's entries are checked against the path's stat
// once their validity runs out.
func TestOpenFileCacheInvalidated(t *testing.T) {
	s := startHaboob(t, sendfileConfig)
	c := s.client(t)
	path := filepath.Join(s.root, "big.bin")
	if _, body := s.do(t, c, "GET", "/big.bin"); body != bigFile {
		t.Fatalf("got %d bytes, want %d", len(body), len(bigFile))
	}
	if st := s.hb.Cache().Stats(); st.OpenFiles != 1 || st.Bytes != 0 {
		t.Fatalf("the file was not left to the open-file cache: %+v", st)
	}
	later := time.Now().Add(time.Hour)
	changed := strings.Repeat("changed!", 3000)
	replaced := strings.Repeat("replaced", 4000)
	tests := []struct {
		name   string
		change func()
		status int
		body   string
	}{
		{"rewritten in place", func() {
			write(t, path, changed)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}, 200, changed},
		{"replaced by rename", func() {
			tmp := filepath.Join(s.root, "new.tmp")
			write(t, tmp, replaced)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, 200, replaced},
		{"removed", func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, 404, ""},
	}
	for _, tc := range tests {
		tc.change()
		poll(t, tc.name, func() bool {
			resp, body := s.do(t, c, "GET", "/big.bin")
			return resp.StatusCode == tc.status && (tc.status != 200 || body == tc.body)
		})
	}
	if st := s.hb.Cache().Stats(); st.OpenFileStale < 2 || st.OpenFiles != 0 {
		t.Fatalf("stale entries not counted, or the removed file kept open: %+v", st)
	}
}
