package haboob

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// recorder is a sink that records, in one sequence, what reaches it; name
// tells the two sinks of a test apart.
type recorder struct {
	sink.Sink // unused methods
	name      string
	got       *[]string
}

func (r recorder) Enqueue(e sink.Event) error {
	switch v := e.(type) {
	case *http.Reply:
		*r.got = append(*r.got, r.name+":"+v.Req.Path)
		if v.Done != nil {
			v.Done(nil)
		}
	case *http.Request:
		*r.got = append(*r.got, r.name+":"+v.Path)
	}
	return nil
}

func (r recorder) EnqueueLossy(e sink.Event) bool { return r.Enqueue(e) == nil }

func TestPageCacheBatchOrder(t *testing.T) {
	var got []string
	cache := NewPageCache(1 << 20)
	for path, size := range map[string]int{"/big": 300, "/mid": 100, "/small": 10, "/tiny": 1} {
		cache.Insert(path, []byte(strings.Repeat("x", size)), "text/plain", Validators{}).Release()
	}
	h := &pageCache{
		log:   slog.New(slog.DiscardHandler),
		args:  cacheArgs{Revalidate: -1},
		cache: cache,
		miss:  recorder{name: "miss", got: &got},
		send:  viaStage(recorder{name: "send", got: &got}),
	}
	var batch []sink.Event
	for i, path := range []string{"/missing1", "/big", "/small", "/missing2", "/mid", "/tiny", "/small", "/big"} {
		batch = append(batch, &http.Request{Method: "GET", Path: path, Seq: uint64(i)})
	}
	if err := h.HandleEvents(batch); err != nil {
		t.Fatal(err)
	}
	// Hits first, shortest page first (equal sizes in arrival order), then
	// the misses in arrival order.
	want := []string{"send:/tiny", "send:/small", "send:/small", "send:/mid", "send:/big", "send:/big", "miss:/missing1", "miss:/missing2"}
	if !slices.Equal(got, want) {
		t.Fatalf("order\n got %v\nwant %v", got, want)
	}
	if st := cache.Stats(); st.Hits != 6 || st.Misses != 2 {
		t.Fatalf("cache stats %+v", st)
	}
}

// TestGetFresh: the Combine path's lookup returns a page only while its
// file was checked within maxAge, and counts a hit only then (a page it
// declines is looked up, and counted, by the PageCache stage).
func TestGetFresh(t *testing.T) {
	c := NewPageCache(1 << 20)
	p := c.Insert("/a", []byte("aaa"), "text/plain", Validators{ETag: `"1"`})
	p.Release()
	now := sink.Nanotime()
	p.checked.Store(now - int64(time.Minute))
	if _, ok := c.getFresh("/a", now, time.Second); ok {
		t.Fatal("a page due for revalidation was fresh")
	}
	if _, ok := c.getFresh("/b", now, time.Second); ok {
		t.Fatal("a page not cached was found")
	}
	if st := c.Stats(); st.Hits != 0 || st.Misses != 0 {
		t.Fatalf("declined lookups counted: %+v", st)
	}
	got, ok := c.getFresh("/a", now, 2*time.Minute)
	if !ok || got != p {
		t.Fatal("a page checked within maxAge was not fresh")
	}
	got.Release()
	if got, ok = c.getFresh("/a", now, 0); !ok {
		t.Fatal("maxAge 0 (never revalidate) refused a page")
	}
	got.Release()
	if st := c.Stats(); st.Hits != 2 {
		t.Fatalf("hits %d, want 2", st.Hits)
	}
}
