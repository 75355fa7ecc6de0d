package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sandstorm-go/sandstorm/arashi"
	"github.com/sandstorm-go/sandstorm/arashi/load"
)

// degrade runs Figs. 56 and 57: the load spike of Figs. 52 and 55 (3
// users, 1000 more in the middle third) without control, with service
// degradation alone, and with degradation plus admission control at the
// lowest quality. It samples the quality of the degrading stages once a
// second.
func degrade(o options, log *slog.Logger, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	const base, burst = 3, 1000
	total := o.duration
	in, out := total/3, 2*total/3
	bucket := max(time.Second, total/30)
	xl := "time (s); 1000 more users in the middle third"
	fmt.Fprintf(stdout, "%d users throughout, %d more from %v to %v\n\n", base, burst, in, out)
	fmt.Fprintln(stdout, "| run | p90 before ms | p90 during the spike ms | rejected during the spike | admitted req/s during the spike | mean quality during the spike: folders, list, search |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|")
	traced := []arashi.Kind{arashi.ListFolders, arashi.ListMessages, arashi.Search}
	var p90s, rejs, quals []series
	for _, run := range []struct {
		name, pred string
		mode       arashi.Degrade
	}{
		{"no control", noControl, arashi.DegradeOff},
		{"degradation alone", arashi.DefaultPredicate, arashi.DegradeAlone},
		{"degradation + admission", arashi.DefaultPredicate, arashi.DegradeAdmission},
	} {
		svc, err := serverDegrading(&o, log, run.pred, run.mode)
		if err != nil {
			return err
		}
		// Sample the degraders' quality once a second.
		var trace struct {
			t []float64
			q [][]float64
		}
		trace.q = make([][]float64, len(traced))
		done, sampled := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sampled)
			begin := time.Now()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case now := <-tick.C:
					trace.t = append(trace.t, now.Sub(begin).Seconds())
					for i, k := range traced {
						trace.q[i] = append(trace.q[i], svc.App.Quality(k))
					}
				}
			}
		}()
		samples, err := drive(load.Config{
			Addr: svc.App.Addr().String(), Users: base + burst, Accounts: o.accounts, Seed: o.seed,
			Start: func(i int) time.Duration {
				if i >= base {
					return in
				}
				return 0
			},
			Stop: func(i int) time.Duration {
				if i >= base {
					return out
				}
				return total
			},
		}, 0, total)
		close(done)
		<-sampled
		stop(svc)
		if err != nil {
			return err
		}
		p, r := series{name: run.name, dashed: run.mode == arashi.DegradeOff}, series{name: run.name, dashed: run.mode == arashi.DegradeOff}
		for t := time.Duration(0); t+bucket <= total; t += bucket {
			s := load.Summarize(samples, load.Window(t, t+bucket))
			if s.Requests == 0 {
				continue
			}
			x := (t + bucket/2).Seconds()
			p.x, p.y = append(p.x, x), append(p.y, ms(s.P90))
			r.x, r.y = append(r.x, x), append(r.y, 100*s.RejectRate())
		}
		p90s, rejs = append(p90s, p), append(rejs, r)
		meanQ := make([]string, len(traced))
		for i, k := range traced {
			sum, n := 0.0, 0
			for j, t := range trace.t {
				if t >= in.Seconds() && t < out.Seconds() {
					sum, n = sum+trace.q[i][j], n+1
				}
			}
			meanQ[i] = "–"
			if n > 0 && run.mode != arashi.DegradeOff {
				meanQ[i] = fmt.Sprintf("%.2f", sum/float64(n))
			}
			if run.mode != arashi.DegradeOff {
				quals = append(quals, series{name: k.String() + ", " + run.mode.String(), x: trace.t, y: trace.q[i], dashed: run.mode == arashi.DegradeAdmission})
			}
		}
		before, during := load.Summarize(samples, load.Window(0, in)), load.Summarize(samples, load.Window(in, out))
		fmt.Fprintf(stdout, "| %s | %.0f | %.0f | %.1f %% | %.0f | %s, %s, %s |\n", run.name, ms(before.P90), ms(during.P90), 100*during.RejectRate(),
			float64(during.Admitted)/(out-in).Seconds(), meanQ[0], meanQ[1], meanQ[2])
	}
	ref, refLabel := ms(target), "target 250 ms"
	for _, c := range []struct {
		file string
		c    chart
	}{
		{"arashi-fig56-p90.svg", chart{title: "Arashi in a load spike: service degradation alone (thesis Fig. 56)", xlabel: xl, ylabel: "p90 ms",
			ref: ref, refLabel: refLabel, lines: p90s[:2]}},
		{"arashi-fig57-p90.svg", chart{title: "Degradation plus admission control (thesis Fig. 57)", xlabel: xl, ylabel: "p90 ms (admitted)",
			ref: ref, refLabel: refLabel, lines: []series{p90s[0], p90s[2]}}},
		{"arashi-fig57-rejected.svg", chart{title: "Degradation plus admission control: rejected (thesis Fig. 57)", xlabel: xl, ylabel: "% rejected",
			lines: rejs[1:]}},
		{"arashi-fig56-quality.svg", chart{title: "Quality factor of the degrading stages (Figs. 56, 57)", xlabel: xl, ylabel: "quality (1: full)",
			lines: quals}},
	} {
		if err := c.c.write(filepath.Join(o.out, c.file)); err != nil {
			return err
		}
	}
	return nil
}
