package http_test

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

func TestH2ManyConcurrentStreamsMixedSizes(t *testing.T) {
	f := startServer(t, http.ServerConfig{}, answerSized)
	client := h2test.Client(t)
	sizes := []int{0, 1, 2, 3, 100, 1000, 16384, 16385, 20000, 65535, 65536, 100_000, 300_001, 1 << 20}
	var wg sync.WaitGroup
	errs := make(chan error, 10*len(sizes))
	for round := range 10 {
		for _, n := range sizes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(fmt.Sprintf("http://%s/size/%d", f.addr, n+round))
				if err != nil {
					errs <- err
					return
				}
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				switch {
				case err != nil:
					errs <- err
				case resp.ProtoMajor != 2:
					errs <- fmt.Errorf("proto %s", resp.Proto)
				case resp.StatusCode != 200 || resp.ContentLength != int64(n+round):
					errs <- fmt.Errorf("size %d: status %d length %d", n+round, resp.StatusCode, resp.ContentLength)
				case !bytes.Equal(got, sizedBody(n+round)):
					errs <- fmt.Errorf("size %d: body of %d bytes differs", n+round, len(got))
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := f.srv.Stats()
	// 140 streams at once, over the 128 a connection serves: the client
	// opens a second connection.
	if st.HTTP2.Connections < 1 || st.HTTP2.Connections > 2 || st.HTTP2.Streams != uint64(10*len(sizes)) {
		t.Errorf("h2 stats %+v, want 1 or 2 connections and %d streams", st.HTTP2, 10*len(sizes))
	}
	g, ok := f.m.Metrics().Get("http.http.h2.streams").(metrics.Gauge)
	if !ok || g.Value() != int64(10*len(sizes)) {
		t.Errorf("metric http.http.h2.streams: %v", f.m.Metrics().Get("http.http.h2.streams"))
	}
}
