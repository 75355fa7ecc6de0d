package http_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

// h2Attack is a hostile client's frames, written on its own connection.
type h2Attack struct {
	name  string
	write func(c *h2test.Conn) error
	code  http2.ErrCode
	count func(http.H2Stats) uint64
}

var h2Attacks = []h2Attack{
	{
		name: "rapid reset (CVE-2023-44487)",
		write: func(c *h2test.Conn) error {
			for id := uint32(1); id < 4000; id += 2 {
				if err := c.Get(id, "/size/10"); err != nil {
					return err
				}
				if err := c.Framer.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
					return err
				}
			}
			return nil
		},
		code:  http2.ErrCodeEnhanceYourCalm,
		count: func(s http.H2Stats) uint64 { return s.TooManyResets },
	},
	{
		name: "streams over the limit, refused",
		write: func(c *h2test.Conn) error {
			for id := uint32(1); id < 4000; id += 2 {
				if err := c.Get(id, "/hold"); err != nil {
					return err
				}
			}
			return nil
		},
		code:  http2.ErrCodeEnhanceYourCalm,
		count: func(s http.H2Stats) uint64 { return s.TooManyResets },
	},
	{
		name: "CONTINUATION flood (CVE-2024-27316)",
		write: func(c *h2test.Conn) error {
			block := c.Block("/size/10", "x-filler", strings.Repeat("z", 200))
			if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:1], EndStream: true}); err != nil {
				return err
			}
			for i := 1; i < len(block); i++ {
				if err := c.Framer.WriteContinuation(1, false, block[i:i+1]); err != nil {
					return err
				}
			}
			return nil
		},
		code:  http2.ErrCodeEnhanceYourCalm,
		count: func(s http.H2Stats) uint64 { return s.Continuations },
	},
	{
		name: "header list too large",
		write: func(c *h2test.Conn) error {
			block := c.Block("/size/10", "x-big", strings.Repeat("z", 5000))
			return c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
		},
		code:  http2.ErrCodeEnhanceYourCalm,
		count: func(s http.H2Stats) uint64 { return s.HeaderListLarge },
	},
	{
		name: "HPACK table size over the limit",
		write: func(c *h2test.Conn) error {
			c.Enc.SetMaxDynamicTableSizeLimit(1 << 20)
			c.Enc.SetMaxDynamicTableSize(1 << 20)
			block := c.Block("/size/10")
			return c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
		},
		code:  http2.ErrCodeCompression,
		count: func(s http.H2Stats) uint64 { return s.HPACKErrors },
	},
	{
		name: "SETTINGS flood",
		write: func(c *h2test.Conn) error {
			for range 4000 {
				if err := c.Framer.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
					return err
				}
			}
			return nil
		},
		code:  http2.ErrCodeEnhanceYourCalm,
		count: func(s http.H2Stats) uint64 { return s.ControlFlood },
	},
	{
		name: "PING flood",
		write: func(c *h2test.Conn) error {
			for i := range 4000 {
				if err := c.Framer.WritePing(false, [8]byte{byte(i)}); err != nil {
					return err
				}
			}
			return nil
		},
		code:  http2.ErrCodeEnhanceYourCalm,
		count: func(s http.H2Stats) uint64 { return s.ControlFlood },
	},
	{
		name: "empty DATA flood",
		write: func(c *h2test.Conn) error {
			c.Buf.Reset()
			for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
				{Name: ":authority", Value: "localhost"}, {Name: ":path", Value: "/hold"}} {
				_ = c.Enc.WriteField(f)
			}
			if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.Buf.Bytes(), EndHeaders: true}); err != nil {
				return err
			}
			for range 4000 {
				if err := c.Framer.WriteData(1, false, nil); err != nil {
					return err
				}
			}
			return nil
		},
		code:  http2.ErrCodeEnhanceYourCalm,
		count: func(s http.H2Stats) uint64 { return s.ControlFlood },
	},
}

// TestH2AttacksBounded runs each known attack on its own connection
// while a normal client is served on another: the attacker gets GOAWAY
// with the expected code, the server counts it, and the normal client's
// requests succeed before, during and after.
func TestH2AttacksBounded(t *testing.T) {
	for _, a := range h2Attacks {
		t.Run(a.name, func(t *testing.T) {
			cfg := http.ServerConfig{HTTP2: http.H2Config{
				MaxConcurrentStreams: 8,
				MaxHeaderListSize:    4096,
				MaxContinuations:     4,
				MaxResetsPerSecond:   50,
				MaxControlPerSecond:  50,
			}}
			f := startServer(t, cfg, func(req *http.Request) {
				if req.Path != "/hold" {
					answerSized(req)
				}
			})
			client := h2test.Client(t)
			normal := func(when string) {
				t.Helper()
				resp, err := client.Get("http://" + f.addr + "/size/5001")
				if err != nil {
					t.Fatalf("normal client %s the attack: %v", when, err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || !bytes.Equal(body, sizedBody(5001)) {
					t.Fatalf("normal client %s the attack: status %d, %d bytes, %v", when, resp.StatusCode, len(body), err)
				}
			}
			normal("before")
			c := h2test.Dial(t, f.addr)
			wrote := make(chan error, 1)
			go func() { wrote <- a.write(c) }()
			normal("during")
			g, err := c.GoAway()
			if err != nil {
				t.Fatalf("no GOAWAY: %v", err)
			}
			if g.ErrCode != a.code {
				t.Errorf("GOAWAY %v (%q), want %v", g.ErrCode, g.DebugData(), a.code)
			}
			// The server closes: EOF, or a reset if the attacker's
			// input was still arriving.
			var ne net.Error
			if _, err := io.Copy(io.Discard, c.Conn); errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("the connection stayed open after GOAWAY: %v", err)
			}
			<-wrote // the writer ends: done, or its connection closed
			st := f.srv.Stats().HTTP2
			if a.count(st) != 1 || st.GoAways != 1 {
				t.Errorf("stats %+v: want the attack counted once", st)
			}
			normal("after")
			if st := f.srv.Stats(); st.HTTP2.Connections != 2 {
				t.Errorf("h2 connections %d, want 2", st.HTTP2.Connections)
			}
		})
	}
}
