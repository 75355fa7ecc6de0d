package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// loadResult summarizes a load test: answers by status, the latencies of
// the 200s and the 503s, and whether every 503 carried Retry-After.
type loadResult struct {
	dur      time.Duration
	byStatus map[int]int
	ok, busy []time.Duration
	noRetry  int // 503s without Retry-After
	errors   int // transport errors
	clients  int
	rate     float64 // offered requests/s (open loop), 0 for a closed loop
	skipped  int     // open loop: requests not sent because every client was busy
}

func (r *loadResult) String() string {
	var b strings.Builder
	total := 0
	for _, n := range r.byStatus {
		total += n
	}
	if r.rate > 0 {
		fmt.Fprintf(&b, "open loop at %.0f requests/s (at most %d in flight, %d not sent), ", r.rate, r.clients, r.skipped)
	} else {
		fmt.Fprintf(&b, "%d closed-loop clients, ", r.clients)
	}
	fmt.Fprintf(&b, "%v: %d answers (%.0f/s), %d transport errors\n", r.dur.Round(time.Millisecond), total, float64(total)/r.dur.Seconds(), r.errors)
	codes := make([]int, 0, len(r.byStatus))
	for c := range r.byStatus {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		fmt.Fprintf(&b, "  %d: %d (%.0f/s)\n", c, r.byStatus[c], float64(r.byStatus[c])/r.dur.Seconds())
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(10 * time.Microsecond)
	}
	fmt.Fprintf(&b, "  200 latency: p50 %v p90 %v p99 %v max %v\n", q(r.ok, .5), q(r.ok, .9), q(r.ok, .99), q(r.ok, 1))
	if len(r.busy) > 0 {
		fmt.Fprintf(&b, "  503 latency: p50 %v p99 %v; without Retry-After: %d\n", q(r.busy, .5), q(r.busy, .99), r.noRetry)
	}
	return b.String()
}

// runLoad has n clients post orders to url back to back (closed loop) for
// d (each client sends at least one); with rate > 0 it sends rate requests
// a second instead (open loop), at most n in flight.
func runLoad(ctx context.Context, url string, n int, d time.Duration, rate float64) (*loadResult, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	res := &loadResult{byStatus: map[int]int{}, clients: n, rate: rate}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	body := []byte(`{"item":"widget","qty":3}`)
	one := func() {
		t0 := time.Now()
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			mu.Lock()
			res.errors++
			mu.Unlock()
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat := time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		res.byStatus[resp.StatusCode]++
		switch resp.StatusCode {
		case http.StatusOK:
			res.ok = append(res.ok, lat)
		case http.StatusServiceUnavailable:
			res.busy = append(res.busy, lat)
			if resp.Header.Get("Retry-After") == "" {
				res.noRetry++
			}
		}
	}
	if rate > 0 {
		slots := make(chan struct{}, n)
		interval := time.Duration(float64(time.Second) / rate)
		for next := start; next.Before(deadline) && ctx.Err() == nil; next = next.Add(interval) {
			time.Sleep(time.Until(next))
			select {
			case slots <- struct{}{}:
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					one()
				}()
			default:
				res.skipped++
			}
		}
	} else {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for first := true; first || time.Now().Before(deadline) && ctx.Err() == nil; first = false {
					one()
				}
			}()
		}
	}
	wg.Wait()
	res.dur = time.Since(start)
	slices.Sort(res.ok)
	slices.Sort(res.busy)
	return res, nil
}
