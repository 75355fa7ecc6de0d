package http

import (
	"fmt"
	"testing"
)

// Lent packet bytes (aio.PacketBorrower: the event loop's buffer, reused
// once onPacket returns) that cannot be parsed at once are copied: while
// another goroutine pumps the connection, or while parsed requests wait
// for room in the pipeline. Every request parses with the bytes its
// packet had, though the buffer is overwritten after each packet.
func TestLentPacketCopiedWhenHeld(t *testing.T) {
	tests := []struct {
		name        string
		maxPipeline int
		// before is called before packet i is handed over; after, once
		// all are: it lets the connection go on.
		before func(c *Connection, i int)
		after  func(c *Connection)
	}{
		{
			name:        "another goroutine pumping",
			maxPipeline: 32,
			before: func(c *Connection, i int) {
				if i == 1 {
					c.pumping = true // packets 1 and 2 are held for it
				}
			},
			after: func(c *Connection) {
				c.mu.Lock()
				c.pumping = false
				c.pump(0)
			},
		},
		{
			name:        "pipeline full",
			maxPipeline: 1,
			after: func(c *Connection) {
				// Request 0 was delivered and is unanswered, 1 parsed and
				// waiting, packet 2 held unparsed. Pretend 0 and 1 were
				// answered: 1 is delivered, then 2 parsed and delivered.
				c.mu.Lock()
				c.nextOut++
				c.pump(0)
				c.mu.Lock()
				c.nextOut++
				c.pump(0)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ServerConfig{MaxPipeline: tc.maxPipeline}.withDefaults()
			cfg.HTTP2.Disable = true // no socket to ask about TLS
			srv := &Server{cfg: cfg}
			c := newConnection(srv, nil)
			var got []string
			srv.cfg.Inline = func(r *Request) bool {
				got = append(got, r.Path)
				return true // taken, not answered: it holds its pipeline slot
			}
			buf := make([]byte, 64) // the lender's buffer
			for i := range 3 {
				if tc.before != nil {
					tc.before(c, i)
				}
				n := copy(buf, fmt.Sprintf("GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n", i))
				if err := c.onPacket(buf[:n], 1, true); err != nil {
					t.Fatal(err)
				}
				for j := range buf {
					buf[j] = 'X' // reused for other connections' bytes
				}
			}
			tc.after(c)
			if fmt.Sprint(got) != "[/r0 /r1 /r2]" {
				t.Fatalf("requests delivered %v, want [/r0 /r1 /r2]", got)
			}
		})
	}
}
