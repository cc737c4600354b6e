package adapters_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testOnly names the modules that only the tests of this module use: the CloudEvents SDK (with which
// the tests read the publishers' messages, through internal/cetest) and what it brings (sarama,
// json-iterator, zap).
var testOnly = []string{"github.com/cloudevents/", "github.com/IBM/sarama", "github.com/json-iterator/", "go.uber.org/zap"}

// TestCodeDoesNotImportTheCloudEventsSDK: no package of this module but internal/cetest (imported by
// tests only) depends on the CloudEvents SDK or its dependencies, so that a program using an adapter
// does not build them (see package internal/envelope for why the code maps the envelope itself).
func TestCodeDoesNotImportTheCloudEventsSDK(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps=false", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const cetest = "github.com/txinbox/txinbox/adapters/internal/cetest"
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == cetest {
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			if dep == cetest {
				t.Errorf("package %s imports %s, which only tests may", fields[0], cetest)
			}
			for _, m := range testOnly {
				if strings.HasPrefix(dep, m) {
					t.Errorf("package %s depends on %s: the CloudEvents SDK is for the tests only", fields[0], dep)
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("go list listed %d packages: the check is broken", checked)
	}
}

// TestOnlyTheTestKitLinksTxinboxtest: of this module's packages only the conformance suite and the
// internal test helpers depend on txinbox's test kit (txinboxtest, and through it testcontainers),
// so that a program using an adapter builds neither.
func TestOnlyTheTestKitLinksTxinboxtest(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps=false", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/txinbox/txinbox/adapters"
	kit := []string{self + "/conformance", self + "/internal/adaptertest", self + "/internal/pubtest", self + "/internal/chaintest"}
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || slices.Contains(kit, fields[0]) {
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			if dep == "github.com/txinbox/txinbox/txinboxtest" || strings.Contains(dep, "testcontainers") {
				t.Errorf("package %s depends on %s: only the conformance suite and the test helpers may", fields[0], dep)
				break
			}
		}
	}
	if checked < 5 {
		t.Fatalf("go list listed %d packages: the check is broken", checked)
	}
}
