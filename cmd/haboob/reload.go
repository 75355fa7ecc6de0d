package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/sandstorm-go/sandstorm/stage"
)

// notifyHangup starts delivering SIGHUP to the returned channel.
func notifyHangup() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// onHangup handles SIGHUP until stop is closed: the HTTPS certificates
// are read again, and the -config file is applied to the running stages
// (stage.Manager.Reload). Connections stay open either way. It returns
// once stop is closed; serve waits for it.
//
// The caller registers hup (notifyHangup) before it announces that it is
// ready, so that a SIGHUP sent right after "ready" reloads rather than
// terminating the process (SIGHUP's default action).
func (in *instance) onHangup(configPath string, hup chan os.Signal, stop <-chan struct{}) {
	defer signal.Stop(hup)
	for {
		select {
		case <-stop:
			return
		case <-hup:
		}
		if err := in.hb.ReloadCertificates(); err != nil {
			in.log.Error("haboob: certificates not reloaded (the old ones stay in use)", "err", err)
		} else {
			in.log.Info("haboob: certificates reloaded")
		}
		in.reloadConfig(configPath)
	}
}

// reloadConfig reads the -config file again and applies it in place: the
// changed predicates, thresholds, pool and batching bounds of the running
// stages, added and removed stages. A file with errors, or without an
// HttpRecv stage, is refused whole, every error logged at ERROR, and the
// running configuration stays. What cannot change in place (a handler's
// args, global.aio, …) is named in the logged summary and waits for a
// restart. Without -config the embedded configuration has nothing new.
func (in *instance) reloadConfig(path string) {
	if path == "" {
		in.log.Info("haboob: SIGHUP: no -config file, the embedded configuration stays")
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		stage.LogReload(in.log, path, nil, err)
		return
	}
	cfg, err := stage.CheckConfig(data, path, in.m.Registry())
	if err == nil {
		err = needHttpRecv(cfg)
	}
	if err != nil {
		stage.LogReload(in.log, path, nil, err)
		return
	}
	sum, err := in.m.Reload(cfg)
	stage.LogReload(in.log, path, sum, err)
}
