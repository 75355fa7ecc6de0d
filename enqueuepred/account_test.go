package enqueuepred

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func TestAccounting(t *testing.T) {
	a := newAccounting(newCounter(2), AccountingConfig{Max: 2})
	alice, bob, carol := ev{id: "alice"}, ev{id: "bob"}, ev{id: "carol"}
	if !a.Accept(alice) || !a.Accept(bob) || a.Accept(alice) {
		t.Fatal("counter limit 2 not applied through the wrapper")
	}
	sink.Done(a, alice, 3*time.Millisecond, 10*time.Millisecond)
	if !a.Accept(carol) { // third principal: accounted as "other"
		t.Fatal("carol refused")
	}
	sink.Cancel(a, carol)
	a.Accept(ev{}) // anonymous, also beyond Max: other
	u := a.usage()
	want := map[string]principalUsage{
		"alice": {Admitted: 1, Rejected: 1, Done: 1, Service: 10 * time.Millisecond, Queued: 3 * time.Millisecond},
		"bob":   {Admitted: 1},
		"other": {Admitted: 2},
	}
	if len(u) != len(want) {
		t.Fatalf("usage %v", u)
	}
	for id, w := range want {
		if u[id] != w {
			t.Errorf("%s: %+v, want %+v", id, u[id], w)
		}
	}
	m := inspectMap(a)
	if m["principal.alice.service_s"] != 0.01 || m["principal.alice.rejected"] != 1 || m["0.counter.inflight"] != 2 {
		t.Fatalf("inspect %v", m)
	}
	if got := metricName("a.b c/d"); got != "a_b_c_d" {
		t.Fatal(got)
	}
}
