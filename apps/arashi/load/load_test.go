package load_test

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/apps/arashi/load"
)

func TestTransitionsAreFig46(t *testing.T) {
	for from, row := range load.Transitions {
		sum := 0.0
		for _, p := range row {
			sum += p
		}
		k := arashi.Kind(from)
		switch k {
		case arashi.Delete, arashi.Refile, arashi.Compose:
			if sum != 0 {
				t.Errorf("%v: row sums to %v, want an empty row", k, sum)
			}
		default:
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("%v: row sums to %v, want 1", k, sum)
			}
		}
	}
	if p := load.Transitions[arashi.ShowMessage][arashi.ListMessages]; p != 0.58 {
		t.Errorf("show -> list = %v, want 0.58 (Fig. 46)", p)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 10; i++ {
		ds = append(ds, time.Duration(11-i))
	}
	if p := load.Percentile(ds, 0.9); p != 9 {
		t.Errorf("p90 of 1..10 = %v, want 9", p)
	}
	if p := load.Percentile(nil, 0.9); p != 0 {
		t.Errorf("p90 of nothing = %v", p)
	}
}

// TestRunAgainstArashi drives a small Arashi with a few emulated users of
// two classes until they have made some requests, and checks that they
// followed the model: they logged in, listed folders and messages and
// opened messages, every request got an answer, and classes are recorded.
func TestRunAgainstArashi(t *testing.T) {
	svc, err := arashi.Start(context.Background(), arashi.Config{
		Addr: "127.0.0.1:0", Users: 4, Seed: 1, MaxFolder: 80,
		// No admission control: on a busy test machine an rt controller
		// might refuse requests, and this test checks the client's model.
		Predicate: "{type: threshold, limit: 100000}",
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan []load.Sample)
	go func() {
		s, err := load.Run(ctx, load.Config{
			Addr: svc.App.Addr().String(), Users: 4, Accounts: 4, Seed: 5,
			Class: func(i int) int { return i % 2 },
		})
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	// Stop once the users have opened 20 messages between them: poll the
	// server's statistics rather than sleeping for a fixed time.
	st, _ := svc.Manager.Stage("ShowMessage")
	deadline := time.Now().Add(60 * time.Second)
	for st.Stats().Events < 20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	samples := <-done
	kinds := map[arashi.Kind]int{}
	classes := map[int]int{}
	for _, s := range samples {
		kinds[s.Kind]++
		classes[s.Class]++
		if !s.Admitted() {
			t.Errorf("%v request of user %d: status %d", s.Kind, s.User, s.Status)
		}
	}
	for _, k := range []arashi.Kind{arashi.Login, arashi.ListFolders, arashi.ListMessages, arashi.ShowMessage} {
		if kinds[k] == 0 {
			t.Errorf("no %v requests in %v", k, kinds)
		}
	}
	if classes[0] == 0 || classes[1] == 0 {
		t.Errorf("samples by class: %v", classes)
	}
	sum := load.Summarize(samples, nil)
	if sum.Admitted != len(samples) || sum.P90 <= 0 {
		t.Errorf("summary %+v of %d samples", sum, len(samples))
	}
}
