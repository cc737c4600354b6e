// Package pgcontainer starts the test kit's PostgreSQL container with testcontainers-go: the last
// choice of txinboxtest's harness, taken only when Docker is available, and the command
// txinboxtest/cmd/txinbox-testpg (which txinbox's own tests run for theirs). It is the only package
// of the module that imports testcontainers.
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package pgcontainer

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Image is the PostgreSQL image the kit starts.
const Image = "postgres:15-alpine"

// Start starts a PostgreSQL container (user postgres, password postgres, database txinbox) and returns
// its connection string and a function that removes it. If the process dies first, testcontainers'
// reaper (Ryuk) removes the container. An error says why Docker could not be used; Start does not
// panic when no Docker engine is found.
func Start(ctx context.Context) (url string, terminate func(context.Context) error, err error) {
	defer func() {
		if r := recover(); r != nil { // testcontainers panics when it finds no Docker
			err = fmt.Errorf("testcontainers: %v", r)
		}
	}()
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", nil, err
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		return "", nil, err
	}
	c, err := tcpostgres.Run(ctx, Image,
		tcpostgres.WithDatabase("txinbox"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(time.Minute)))
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return "", nil, err
	}
	url, err = c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = c.Terminate(context.Background())
		return "", nil, err
	}
	return url, func(ctx context.Context) error { return c.Terminate(ctx) }, nil
}
