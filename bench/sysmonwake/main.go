// Command sysmonwake measures what waking an idle goroutine costs in context
// switches, by where the goroutine waits:
//
//   - epoll: in a raw epoll_wait(-1), as gnet's event loops and aio's write
//     poller do. The goroutine keeps its P in the system call; after 10 ms
//     the runtime's sysmon thread retakes the P, and every retake puts
//     sysmon back to polling every 20 µs (then backing off by doubling).
//   - netpoll: in Go's netpoller (a pipe read), as net/http does: the
//     goroutine parks without a P and sysmon stays asleep.
//   - nested-epoll: an epoll descriptor itself parked in the netpoller
//     (it is readable when one of its descriptors is ready), drained with
//     epoll_wait(0): the raw epoll set without the P held in a system call.
//
// Usage: sysmonwake -mode epoll|netpoll|nested-epoll [-wakes 100] [-every 20ms]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	mode := flag.String("mode", "epoll", "where the goroutine waits: epoll, netpoll or nested-epoll")
	wakes := flag.Int("wakes", 100, "wake-ups to measure")
	every := flag.Duration("every", 20*time.Millisecond, "time between wake-ups")
	flag.Parse()
	if err := run(*mode, *wakes, *every); err != nil {
		fmt.Fprintln(os.Stderr, "sysmonwake:", err)
		os.Exit(1)
	}
}

func run(mode string, wakes int, every time.Duration) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	woken := make(chan struct{})
	wait, err := waiter(mode, r)
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 16)
		for {
			if err := wait(); err != nil {
				fmt.Fprintln(os.Stderr, "sysmonwake: wait:", err)
				os.Exit(1)
			}
			_, _ = r.Read(buf)
			woken <- struct{}{}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	before, err := processSwitches()
	if err != nil {
		return err
	}
	for range wakes {
		time.Sleep(every)
		if _, err := w.Write([]byte{1}); err != nil {
			return err
		}
		<-woken
	}
	after, err := processSwitches()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %.1f context switches per wake-up (%d wake-ups every %v)\n", mode, float64(after-before)/float64(wakes), wakes, every)
	return nil
}

// waiter returns a function that blocks until r is readable, waiting as
// mode says.
func waiter(mode string, r *os.File) (func() error, error) {
	switch mode {
	case "netpoll":
		rc, err := r.SyscallConn()
		if err != nil {
			return nil, err
		}
		// Returning false parks the goroutine in the netpoller until r
		// is readable; the read itself is the caller's. f looks first
		// (poll with no timeout): RawConn.Read forgets a readiness the
		// netpoller saw before it was called, so a wait that trusted the
		// edge alone could miss data already in the pipe.
		return func() error {
			return rc.Read(func(fd uintptr) bool {
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				n, err := unix.Poll(fds, 0)
				return n > 0 || (err != nil && err != unix.EINTR)
			})
		}, nil
	case "epoll", "nested-epoll":
	default:
		return nil, fmt.Errorf("unknown -mode %q (want epoll, netpoll or nested-epoll)", mode)
	}
	rc, err := r.SyscallConn()
	if err != nil {
		return nil, err
	}
	var rfd int
	if err := rc.Control(func(fd uintptr) { rfd = int(fd) }); err != nil {
		return nil, err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, rfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(rfd)}); err != nil {
		return nil, err
	}
	events := make([]unix.EpollEvent, 8)
	if mode == "epoll" {
		return func() error {
			for {
				n, err := unix.EpollWait(ep, events, -1)
				if n > 0 {
					return nil
				}
				if err != nil && err != unix.EINTR {
					return err
				}
			}
		}, nil
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		return nil, err
	}
	epc, err := os.NewFile(uintptr(ep), "epoll").SyscallConn()
	if err != nil {
		return nil, err
	}
	return func() error {
		var werr error
		err := epc.Read(func(fd uintptr) bool {
			n, err := unix.EpollWait(int(fd), events, 0)
			if err != nil && err != unix.EINTR {
				werr = err
				return true
			}
			return n > 0
		})
		if err != nil {
			return err
		}
		return werr
	}, nil
}

// processSwitches sums the voluntary and involuntary context switches of
// every thread of this process.
func processSwitches() (int, error) {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		return 0, err
	}
	total := 0
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			name, value, ok := bytes.Cut(sc.Bytes(), []byte(":"))
			if !ok || !bytes.HasSuffix(name, []byte("ctxt_switches")) {
				continue
			}
			n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
			if err != nil {
				return 0, fmt.Errorf("%s: %w", t, err)
			}
			total += n
		}
	}
	return total, nil
}
