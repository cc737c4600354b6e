package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// buildNotifier builds the notifier example (examples/notifier, a module of its own, in src) into
// dir and returns the binary's path. The demo runs it as a child process, as it would be deployed.
func buildNotifier(ctx context.Context, src, dir string) (string, error) {
	if st, err := os.Stat(filepath.Join(src, "go.mod")); err != nil || st.IsDir() {
		return "", fmt.Errorf("no notifier module in %s (run the demo from examples/ledger, or pass --notifier BINARY)", src)
	}
	bin := filepath.Join(dir, "notifier")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.Join(fmt.Errorf("go build %s: %w", src, err), errors.New(string(out)))
	}
	return bin, nil
}
