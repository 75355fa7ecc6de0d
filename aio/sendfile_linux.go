//go:build linux

package aio

import (
	"errors"
	"sync"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// errSocketFull reports a socket that takes no more bytes for now.
var errSocketFull = unix.EAGAIN

// sendFileSegment sends up to n bytes of f from off to the connection's
// socket with sendfile(2), on its event loop with gnet's own buffer empty,
// until they are sent, the socket is full (errSocketFull, with what was
// sent) or it fails. (0, nil) means the file ends at off. A file
// sendfile cannot read (EINVAL, ENOSYS) is copied instead.
func sendFileSegment(gc gnet.Conn, f *SharedFile, off, n int64) (int64, error) {
	fd, in := gc.Fd(), f.fd
	var sent int64
	for sent < n {
		pos := off + sent
		m, err := unix.Sendfile(fd, in, &pos, int(min(n-sent, 1<<30)))
		if m > 0 {
			sent += int64(m)
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return sent, errSocketFull
		case sent == 0 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)):
			return copyFileSegment(gc, f, off, n)
		case err != nil:
			return sent, err
		case m == 0:
			return sent, nil // end of file
		}
	}
	return sent, nil
}

// writeCorked writes bufs straight to the connection's socket with
// MSG_MORE (the kernel holds a short segment back for the file bytes that
// follow) and returns what the socket did not take, for gnet's buffer. On
// any error it writes nothing and returns bufs: gnet's write reports it.
func writeCorked(gc gnet.Conn, bufs [][]byte) [][]byte {
	n, err := unix.SendmsgBuffers(gc.Fd(), bufs, nil, nil, unix.MSG_MORE|unix.MSG_NOSIGNAL)
	if err != nil || n <= 0 {
		return bufs
	}
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if n > 0 {
		rest := append([][]byte(nil), bufs...)
		rest[0] = rest[0][n:]
		return rest
	}
	return bufs
}

// writePoller wakes connections whose socket was full when they had a
// file segment to send, once it is writable: one goroutine per socket
// (engine), with an epoll set of its own in which each waiting
// connection's descriptor is registered for EPOLLOUT, one-shot. gnet has
// no writable callback; its own epoll set only watches for output while
// its buffer holds bytes, and a file segment is not in its buffer. The
// wake-up is gnet's Wake, which runs the connection's OnTraffic on its
// event loop, where the segment is sent.
type writePoller struct {
	epfd, evfd int

	mu    sync.Mutex
	conns map[int]*Connection // by descriptor: registered in the set
	done  chan struct{}
}

func newWritePoller() (*writePoller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(evfd)
		return nil, err
	}
	p := &writePoller{epfd: epfd, evfd: evfd, conns: map[int]*Connection{}, done: make(chan struct{})}
	go p.run()
	return p, nil
}

// watch has c woken once its descriptor fd is writable.
func (p *writePoller) watch(c *Connection, fd int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLONESHOT, Fd: int32(fd)}
	if _, ok := p.conns[fd]; ok {
		// Registered already: re-arm. (Should the descriptor have been
		// closed meanwhile, the kernel dropped it from the set: add it.)
		p.conns[fd] = c
		err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		delete(p.conns, fd)
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return err
	}
	p.conns[fd] = c
	return nil
}

// forget removes c's descriptor (OnClose, before gnet closes it).
func (p *writePoller) forget(c *Connection, fd int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[fd] != c {
		return
	}
	delete(p.conns, fd)
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
}

func (p *writePoller) run() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == p.evfd {
				return // stop
			}
			p.mu.Lock()
			c := p.conns[fd]
			p.mu.Unlock()
			if c != nil {
				_ = c.gc.Wake(nil) // a closed connection's Wake is ignored by gnet
			}
		}
	}
}

// stop ends the goroutine and closes the descriptors.
func (p *writePoller) stop() {
	var one = [8]byte{1}
	_, _ = unix.Write(p.evfd, one[:])
	<-p.done
	_ = unix.Close(p.epfd)
	_ = unix.Close(p.evfd)
}

// waitWritableLocked has the connection woken when its socket is
// writable (event loop, c.mu held). If the engine's poller cannot watch
// it, the drain poll comes back instead.
func (c *Connection) waitWritableLocked(gc gnet.Conn) {
	p := c.eng.writePoller()
	if p == nil || p.watch(c, gc.Fd()) != nil {
		return
	}
	c.fileWait = true
	c.eng.files.waits.Add(1)
}

// forgetWritable takes c out of the poller's set (OnClose).
func (c *Connection) forgetWritable(gc gnet.Conn) {
	if p := c.eng.files.poller.Load(); p != nil {
		p.forget(c, gc.Fd())
	}
}

// writePoller returns the engine's poller, started on first use (nil if
// it cannot be).
func (e *engine) writePoller() *writePoller {
	fs := &e.files
	if p := fs.poller.Load(); p != nil {
		return p
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if p := fs.poller.Load(); p != nil || fs.stopped {
		return p
	}
	p, err := newWritePoller()
	if err != nil {
		e.log.Warn("aio: no write poller for file segments; polling their sockets instead", "err", err)
		return nil
	}
	fs.poller.Store(p)
	return p
}

// stop stops the poller, if one was started (engine finish).
func (fs *fileSending) stop() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.stopped = true
	if p := fs.poller.Swap(nil); p != nil {
		p.stop()
	}
}
