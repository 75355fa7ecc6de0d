package arashi_test

import (
	"context"
	"fmt"
	"log/slog"
	nethttp "net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
)

// Start serves Arashi on a fresh generated database; a login answers with
// a redirect to the folders page carrying the session key.
func ExampleStart() {
	svc, err := arashi.Start(context.Background(), arashi.Config{
		Addr:      "127.0.0.1:0", // any free port
		Users:     3,
		MaxFolder: 20,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
	}()
	fmt.Println("messages generated:", svc.Gen.Messages > 20)

	name, password := arashi.Credentials(2)
	client := &nethttp.Client{CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse }}
	resp, err := client.PostForm("http://"+svc.App.Addr().String()+"/login", url.Values{"user": {name}, "password": {password}})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	fmt.Println(resp.StatusCode, strings.HasPrefix(loc, "/folders?s="), len(strings.TrimPrefix(loc, "/folders?s=")))
	// Output:
	// messages generated: true
	// 303 true 16
}
