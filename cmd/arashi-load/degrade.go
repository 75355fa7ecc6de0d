package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/apps/arashi/load"
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
	total, in, out, bucket := o.thirds()
	xl := "time (s); 1000 more users in the middle third"
	fmt.Fprintf(stdout, "%d users throughout, %d more from %v to %v\n\n", spikeBase, spikeBurst, in, out)
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
		endTrace := everySecond(func(elapsed float64) {
			trace.t = append(trace.t, elapsed)
			for i, k := range traced {
				trace.q[i] = append(trace.q[i], svc.App.Quality(k))
			}
		})
		samples, err := middleThird(&o, svc.App.Addr().String(), spikeBase+spikeBurst, spikeBase, nil)
		endTrace()
		stop(svc)
		if err != nil {
			return err
		}
		p, r := series{name: run.name, dashed: run.mode == arashi.DegradeOff}, series{name: run.name, dashed: run.mode == arashi.DegradeOff}
		overTime(&p, &r, samples, total, bucket, load.Window)
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
