package arashi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestDegradationFollowsReload: a reload that replaces the request-type
// stages' rt predicates (a new target) hands each new one to the running
// stages: the degraders drive it (its target, their admission wish), the
// mode's switches apply to it (alone: admission off everywhere), and the
// replaced predicates are left alone.
func TestDegradationFollowsReload(t *testing.T) {
	for _, mode := range []arashi.Degrade{arashi.DegradeAdmission, arashi.DegradeAlone} {
		t.Run(mode.String(), func(t *testing.T) {
			svc, base := startDegrading(t, mode)
			old := stageRT(t, svc, "ListMessages")
			next := strings.ReplaceAll(string(configs.Arashi), "predicate: "+arashi.DefaultPredicate, "predicate: {type: rt, target: 100ms}")
			cfg, err := stage.ParseConfig([]byte(next), configs.ArashiFile)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := svc.Manager.Reload(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(sum)
			list := stageRT(t, svc, "ListMessages")
			if list == old || list.Target() != 100*time.Millisecond {
				t.Fatalf("the reload did not install the new rt predicate (target %v)", list.Target())
			}
			deg := svc.App.DegraderOf(arashi.ListMessages)
			if deg.ResponseTime() != list {
				t.Fatal("ListMessages' degrader still drives the replaced rt predicate")
			}
			if list.Enabled() {
				t.Error("the new rt predicate admits: the degrader degrades first")
			}
			if login := stageRT(t, svc, "Login"); login.Enabled() != (mode == arashi.DegradeAdmission) {
				t.Errorf("Login's new rt predicate: admission %v in mode %v", login.Enabled(), mode)
			}

			// Overloaded: at the lowest quality the degrader switches the
			// new predicate's admission control on, in admission mode
			// only; the old one stays off.
			overload(deg, time.Hour, 20, time.Second)
			if q := deg.Quality(); q != 0.05 {
				t.Errorf("quality %v after 20 periods over target, want 0.05", q)
			}
			if list.Enabled() != (mode == arashi.DegradeAdmission) || old.Enabled() {
				t.Errorf("admission: new predicate %v, old %v in mode %v", list.Enabled(), old.Enabled(), mode)
			}
			c := newClient(t, base)
			key := c.login("user2", "pass2")
			inbox := c.folders(key)[arashi.InboxFolder]
			if status, _, h := c.do("GET", "/list?s="+key+"&f="+inbox[0], nil); status != 200 || h.Get("X-Quality") != "0.050" {
				t.Errorf("list after the reload: %d, X-Quality %q", status, h.Get("X-Quality"))
			}
		})
	}
}
