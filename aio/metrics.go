package aio

import (
	"fmt"
	"sync"
	"sync/atomic"

	metrics "github.com/rcrowley/go-metrics"
)

// SocketStats are a server's or client's counters. All but Open are
// cumulative.
type SocketStats struct {
	Open          int    // connections open now
	Accepted      uint64 // connections accepted (server)
	Connected     uint64 // connections made (client)
	ConnectFailed uint64 // connects that failed (client)
	Closed        uint64 // connections closed
	// RejectedAccepts counts connections closed at once: accept suspended,
	// or the sink refused the Connection event.
	RejectedAccepts uint64
	// OverLimit counts connections closed at accept because
	// MaxConnections were open (included in RejectedAccepts).
	OverLimit uint64
	// AcceptErrors counts failed accepts (EMFILE, ENFILE when descriptors
	// run out, ...): each is retried after a back-off.
	AcceptErrors  uint64
	BytesIn       uint64 // bytes handed to readers as packets
	BytesOut      uint64 // bytes written to the kernel
	Packets       uint64 // packets handed to readers
	Clogs         uint64 // clog episodes (SinkClogged events)
	RefusedWrites uint64 // writes refused for a clogged connection
	// RejectedReads counts rejections by user sinks: each one pauses the
	// connection's delivery (and reading) until the sink accepts.
	RejectedReads uint64
	// GovernorPauses counts the times the read-rate governor paused a
	// connection's delivery.
	GovernorPauses uint64
	// ReadStops counts the times a connection stopped reading its socket
	// because delivery had to wait (InboundPause).
	ReadStops uint64
	// PauseUnsupported counts connections that could not stop reading
	// their sockets although InboundPause asked for it; MaxInbound bounds
	// their unread bytes instead.
	PauseUnsupported uint64
	IdleClosed       uint64 // connections closed by IdleTimeout
	CloggedClosed    uint64 // connections closed by ClogClose
	OverflowClosed   uint64 // connections closed by MaxInbound
	Lost             uint64 // events no sink would ever take (closed sinks)
	WriteTimeouts    uint64 // connections aborted by WriteTimeout
	Lingered         uint64 // graceful closes that lingered (see Connection.Linger)
	// OutputPending is the bytes of every connection handed to the
	// event loops and not yet written to the kernel (bounded by
	// OutputBudget); bytes waiting behind it are held by reference.
	OutputPending int64
	// FileBytes is the bytes sent from files (WriteFile), and FileWaits
	// how often a file segment waited for its socket to be writable.
	FileBytes, FileWaits uint64
}

type counters struct {
	accepted, connected, connectFailed, closed, rejectedAccepts atomic.Uint64
	bytesIn, bytesOut, packets, clogs, refusedWrites            atomic.Uint64
	rejectedReads, idleClosed, cloggedClosed, overflowClosed    atomic.Uint64
	governorPauses, readStops, pauseUnsupported, lost           atomic.Uint64
	overLimit, acceptErrors                                     atomic.Uint64
	writeTimeouts, lingered                                     atomic.Uint64
	// outPending is the bytes handed to gnet and not yet written to the
	// kernel, over every connection: what OutputBudget bounds.
	outPending atomic.Int64
}

func (e *engine) snapshotStats() SocketStats {
	s := &e.stats
	in, packets, out := e.loopSums()
	return SocketStats{
		Open:             e.open(),
		Accepted:         s.accepted.Load(),
		Connected:        s.connected.Load(),
		ConnectFailed:    s.connectFailed.Load(),
		Closed:           s.closed.Load(),
		RejectedAccepts:  s.rejectedAccepts.Load(),
		OverLimit:        s.overLimit.Load(),
		AcceptErrors:     s.acceptErrors.Load(),
		BytesIn:          s.bytesIn.Load() + in,
		BytesOut:         s.bytesOut.Load() + out,
		Packets:          s.packets.Load() + packets,
		Clogs:            s.clogs.Load(),
		RefusedWrites:    s.refusedWrites.Load(),
		RejectedReads:    s.rejectedReads.Load(),
		GovernorPauses:   s.governorPauses.Load(),
		ReadStops:        s.readStops.Load(),
		PauseUnsupported: s.pauseUnsupported.Load(),
		IdleClosed:       s.idleClosed.Load(),
		CloggedClosed:    s.cloggedClosed.Load(),
		OverflowClosed:   s.overflowClosed.Load(),
		Lost:             s.lost.Load(),
		WriteTimeouts:    s.writeTimeouts.Load(),
		Lingered:         s.lingered.Load(),
		OutputPending:    s.outPending.Load(),
		FileBytes:        e.files.bytes.Load(),
		FileWaits:        e.files.waits.Load(),
	}
}

// metricsMu serializes the choice of metric prefixes and their
// registration, so that sockets of the same name sharing a registry get
// distinct prefixes.
var metricsMu sync.Mutex

// registerMetrics publishes the counters as functional gauges named
// "aio.<socket>.<counter>" in the configured registry. If another socket
// of the same name has its gauges there already, this one takes the first
// free "aio.<socket>-2", "-3" … prefix (see MetricsPrefix) instead of
// replacing them; a name someone else registered is left alone.
func (e *engine) registerMetrics() {
	reg := e.env.Metrics
	if reg == nil {
		return
	}
	metricsMu.Lock()
	defer metricsMu.Unlock()
	e.metricReg = reg
	base := "aio." + e.name
	e.metricPrefix = base
	for i := 2; reg.Get(e.metricPrefix+".connections.open") != nil; i++ {
		e.metricPrefix = fmt.Sprintf("%s-%d", base, i)
	}
	if e.metricPrefix != base {
		e.log.Warn("aio: another socket of this name has metrics in the registry", "prefix", e.metricPrefix)
	}
	s := &e.stats
	gauge := func(name string, f func() int64) {
		full := e.metricPrefix + "." + name
		if err := reg.Register(full, metrics.NewFunctionalGauge(f)); err == nil {
			e.metricNames = append(e.metricNames, full)
		}
	}
	u := func(a *atomic.Uint64) func() int64 { return func() int64 { return int64(a.Load()) } }
	gauge("connections.open", func() int64 { return int64(e.open()) })
	gauge("connections.accepted", u(&s.accepted))
	gauge("connections.connected", u(&s.connected))
	gauge("connections.connectFailed", u(&s.connectFailed))
	gauge("connections.closed", u(&s.closed))
	gauge("connections.rejected", u(&s.rejectedAccepts))
	gauge("connections.overLimit", u(&s.overLimit))
	gauge("accept.errors", u(&s.acceptErrors))
	gauge("bytes.in", func() int64 { return int64(e.snapshotStats().BytesIn) })
	gauge("bytes.out", func() int64 { return int64(e.snapshotStats().BytesOut) })
	gauge("packets.in", func() int64 { return int64(e.snapshotStats().Packets) })
	gauge("clogs", u(&s.clogs))
	gauge("writes.refused", u(&s.refusedWrites))
	gauge("reads.rejected", u(&s.rejectedReads))
	gauge("reads.governed", u(&s.governorPauses))
	gauge("reads.stopped", u(&s.readStops))
	gauge("reads.unpausable", u(&s.pauseUnsupported))
	gauge("closed.idle", u(&s.idleClosed))
	gauge("closed.clogged", u(&s.cloggedClosed))
	gauge("closed.overflow", u(&s.overflowClosed))
	gauge("events.lost", u(&s.lost))
	gauge("bytes.outFromFiles", u(&e.files.bytes))
}

func (e *engine) unregisterMetrics() {
	metricsMu.Lock()
	defer metricsMu.Unlock()
	for _, n := range e.metricNames {
		e.metricReg.Unregister(n)
	}
	e.metricNames = nil
}
