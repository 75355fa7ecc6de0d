package whirlwind_test

import (
	"context"
	"fmt"

	"github.com/sandstorm-go/sandstorm/examples/whirlwind"
)

// Example runs Fig. 1 of the Whirlwind paper: four pipelined requests for
// an image arrive while the file handlers are saturated. The file handler
// group's cost predicate admits the first at full quality, refuses the
// full-quality version of the next two but admits their low-quality
// version, and refuses both versions of the fourth, which the Dispatcher
// answers with 503. The connection answers in request order.
func Example() {
	srv := whirlwind.New(map[string]int{"/files/fire-map.png": 4096})
	m, err := srv.Load()
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	srv.Hold() // the file handlers are busy: their queue builds up
	for id := 1; id <= 4; id++ {
		r := whirlwind.Request{Conn: "c1", ID: id, Session: "s1", Role: whirlwind.User, Path: "/files/fire-map.png", Last: id == 4}
		if err := srv.Send(m, r); err != nil {
			fmt.Println(err)
		}
	}
	for i := 0; i < 4; i++ {
		fmt.Println(<-srv.Decisions())
	}
	srv.Release()
	for i := 0; i < 4; i++ {
		fmt.Println(<-srv.Responses())
	}
	if err := m.Shutdown(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// request 1: full quality admitted
	// request 2: full quality rejected, low quality admitted
	// request 3: full quality rejected, low quality admitted
	// request 4: both qualities rejected: 503
	// request 1: 200 OK (full quality, 4096 bytes)
	// request 2: 200 OK (low quality, 1024 bytes)
	// request 3: 200 OK (low quality, 1024 bytes)
	// request 4: 503 Service Unavailable (connection closed)
}
