// Command txinbox-testpg starts a throwaway PostgreSQL server in a Docker container
// (testcontainers-go), writes its connection string as one line on standard output, keeps it while
// its standard input stays open, and removes it when standard input closes (or on SIGINT/SIGTERM).
//
// txinbox's own test harness (txinboxtest/testdb) runs it, with go run in txinbox's module, when
// neither TXINBOX_TEST_DATABASE_URL nor a server on 127.0.0.1:5432 is available, so that the tests of
// txinbox's packages link no Docker client (the public txinboxtest starts its container
// in-process). By hand:
//
//	go run github.com/txinbox/txinbox/txinboxtest/cmd/txinbox-testpg
//
// prints the URL; set TXINBOX_TEST_DATABASE_URL to it in another shell, and press Ctrl-D (or Ctrl-C)
// to remove the server.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/txinbox/txinbox/txinboxtest/pgcontainer"
)

func main() {
	os.Exit(run())
}

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	url, terminate, err := pgcontainer.Start(startCtx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "txinbox-testpg:", err)
		return 1
	}
	fmt.Println(url)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := terminate(tctx); err != nil {
		fmt.Fprintln(os.Stderr, "txinbox-testpg: remove the container:", err)
		return 1
	}
	return 0
}
