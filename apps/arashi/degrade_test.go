package arashi_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
)

func TestQualityKnobs(t *testing.T) {
	for _, tc := range []struct {
		q      float64
		page   int
		counts bool
	}{
		{1, arashi.PageSize, true},
		{0.5, 25, true},
		{0.49, 25, false},
		{0.2, 10, false},
		{0.05, arashi.MinPage, false},
		{0, arashi.MinPage, false},
	} {
		if got := arashi.PageSizeAt(tc.q); got != tc.page {
			t.Errorf("page size at %v: %d, want %d", tc.q, got, tc.page)
		}
		if got := arashi.WithCountsAt(tc.q); got != tc.counts {
			t.Errorf("counts at %v: %v, want %v", tc.q, got, tc.counts)
		}
	}
}

func startDegrading(t *testing.T, mode arashi.Degrade) (*arashi.Service, string) {
	t.Helper()
	svc := startConfig(t, arashi.Config{Degrade: mode})
	return svc, "http://" + svc.App.Addr().String()
}

func stageRT(t *testing.T, svc *arashi.Service, name string) *enqueuepred.ResponseTime {
	t.Helper()
	st, ok := svc.Manager.Stage(name)
	if !ok {
		t.Fatalf("no stage %s", name)
	}
	rt, ok := st.Sink().Predicate().(*enqueuepred.ResponseTime)
	if !ok {
		t.Fatalf("%s: predicate %T", name, st.Sink().Predicate())
	}
	return rt
}

// overload feeds a degrader n periods of a p90, on a fake clock ahead by
// `ahead` (so the requests' own updates, on the real clock, fall inside
// the last period and change nothing).
func overload(d *enqueuepred.Degrader, ahead time.Duration, n int, p90 time.Duration) {
	t0 := time.Now().Add(ahead)
	for i := range n {
		d.Update(t0.Add(time.Duration(i)*time.Second), p90, 250*time.Millisecond)
	}
}

var reFolderNoCount = regexp.MustCompile(`class="folder" data-f="\d+" href="[^"]*">\w+</a></td><td>–</td>`)

// TestDegradationWithAdmission drives the degraders to their lowest
// quality and checks the pages shrink and admission control comes back,
// and goes away again when the response time recovers.
func TestDegradationWithAdmission(t *testing.T) {
	svc, base := startDegrading(t, arashi.DegradeAdmission)
	for _, k := range arashi.Kinds() {
		if q := svc.App.Quality(k); q != 1 {
			t.Errorf("%s starts at quality %v", k, q)
		}
	}
	list, folders := stageRT(t, svc, "ListMessages"), stageRT(t, svc, "ListFolders")
	if list.Enabled() || folders.Enabled() || !stageRT(t, svc, "Login").Enabled() {
		t.Fatal("degrading stages must start with admission off, the others with it on")
	}
	c := newClient(t, base)
	key := c.login("user2", "pass2")
	inbox := c.folders(key)[arashi.InboxFolder]
	_, page, h := c.do("GET", "/list?s="+key+"&f="+inbox[0], nil)
	full := len(reMsg.FindAllStringSubmatch(page, -1))
	if full <= arashi.MinPage || h.Get("X-Quality") != "1.000" || strings.Contains(page, `id="degraded"`) {
		t.Fatalf("full quality: %d messages, X-Quality %q", full, h.Get("X-Quality"))
	}

	// 20 periods over target: quality 1/1.25^n reaches 0.05 after 14,
	// then admission control is wished on.
	for _, k := range []arashi.Kind{arashi.ListMessages, arashi.ListFolders} {
		overload(svc.App.DegraderOf(k), time.Hour, 20, time.Second)
	}
	if q := svc.App.Quality(arashi.ListMessages); q != 0.05 {
		t.Fatalf("quality after overload: %v", q)
	}
	status, page, h := c.do("GET", "/list?s="+key+"&f="+inbox[0], nil)
	if n := len(reMsg.FindAllStringSubmatch(page, -1)); status != 200 || n != arashi.MinPage || h.Get("X-Quality") != "0.050" || !strings.Contains(page, `id="degraded"`) {
		t.Fatalf("degraded list: %d, %d messages, X-Quality %q", status, n, h.Get("X-Quality"))
	}
	if !list.Enabled() {
		t.Error("lowest quality over target: admission control is still off")
	}
	status, page, _ = c.do("GET", "/folders?s="+key, nil)
	if n := len(reFolderNoCount.FindAllString(page, -1)); status != 200 || n != 4 {
		t.Errorf("degraded folders page: %d, %d folders without counts:\n%s", status, n, page)
	}

	// Recovery: a p90 under half the target switches admission off again.
	overload(svc.App.DegraderOf(arashi.ListMessages), 2*time.Hour, 1, 10*time.Millisecond)
	if status, _, _ := c.do("GET", "/list?s="+key+"&f="+inbox[0], nil); status != 200 || list.Enabled() {
		t.Errorf("after recovery: status %d, admission %v", status, list.Enabled())
	}
}

// TestDegradationAlone: no stage admits by its rt controller, and the
// stages without a quality knob have no degrader.
func TestDegradationAlone(t *testing.T) {
	svc, base := startDegrading(t, arashi.DegradeAlone)
	for _, name := range []string{"Login", "ListFolders", "ListMessages", "ShowMessage", "Search"} {
		if stageRT(t, svc, name).Enabled() {
			t.Errorf("%s: admission control on", name)
		}
	}
	if svc.App.DegraderOf(arashi.ShowMessage) != nil || svc.App.DegraderOf(arashi.Search) == nil {
		t.Error("only folders, list and search degrade")
	}
	overload(svc.App.DegraderOf(arashi.ListMessages), time.Hour, 30, time.Second)
	c := newClient(t, base)
	key := c.login("user2", "pass2")
	if n := len(svc.App.Timings(arashi.Login)); n != 0 {
		t.Errorf("%d timings recorded while off", n)
	}
	svc.App.RecordTimings(true)
	inbox := c.folders(key)[arashi.InboxFolder]
	if status, _, _ := c.do("GET", "/list?s="+key+"&f="+inbox[0], nil); status != 200 || stageRT(t, svc, "ListMessages").Enabled() {
		t.Errorf("alone at the lowest quality: status %d, admission must stay off", status)
	}
	ts := svc.App.Timings(arashi.ListMessages)
	if len(ts) != 1 || ts[0].Before < 0 || ts[0].Service <= 0 || len(svc.App.Timings(arashi.ListFolders)) != 1 {
		t.Errorf("timings: list %+v, folders %d", ts, len(svc.App.Timings(arashi.ListFolders)))
	}
}

func TestDegradeNeedsRT(t *testing.T) {
	_, err := arashi.Start(context.Background(), arashi.Config{
		Addr: "127.0.0.1:0", Users: 2, MaxFolder: 20, Degrade: arashi.DegradeAlone,
		Predicate: "{type: threshold, limit: 10}", Logger: quiet(),
	})
	if err == nil || !strings.Contains(err.Error(), "rt predicate") {
		t.Fatalf("degradation without rt: %v", err)
	}
}

func TestParseDegrade(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want arashi.Degrade
		ok   bool
	}{
		{"", arashi.DegradeOff, true},
		{"off", arashi.DegradeOff, true},
		{"alone", arashi.DegradeAlone, true},
		{"admission", arashi.DegradeAdmission, true},
		{"Alone", arashi.DegradeOff, false},
		{"on", arashi.DegradeOff, false},
	} {
		got, err := arashi.ParseDegrade(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseDegrade(%q) = %v, %v", tc.in, got, err)
		}
	}
	if s := arashi.Degrade(9).String(); s != "Degrade(9)" {
		t.Errorf("String of an unknown mode: %q", s)
	}
}
