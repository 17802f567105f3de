package layers

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestForbiddenImports fails for every import that breaks the layer table.
func TestForbiddenImports(t *testing.T) {
	vs, err := Check(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("%s", v)
	}
}

// TestCheckerCatchesViolations runs the checker on a synthetic module with
// one violation per rule (testdata/bad), so TestForbiddenImports is known
// to be able to fail.
func TestCheckerCatchesViolations(t *testing.T) {
	vs, err := Check(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range vs {
		got[v.Pkg+" -> "+v.Import] = true
	}
	want := []string{
		"builtin/locks -> example.com/bad/builtin/broadcast",
		"builtin/locks -> example.com/bad/host",
		"builtin/locks -> github.com/dgraph-io/badger/v4",
		"builtin/locks -> go.opentelemetry.io/otel/sdk/trace",
		"host/api -> github.com/tetratelabs/wazero",
		"host/api -> github.com/knadh/koanf/v2",
		"host/api -> example.com/bad/cmd/hostd",
		"sdk/abi -> example.com/bad/runtime/sched",
		"sdk -> example.com/bad/runtime/catalog",
		"plugins/p -> example.com/bad/builtin/locks",
		"plugins/p -> github.com/google/go-cmp/cmp",
		"runtime/catalog -> example.com/bad/runtime/wal",
		"runtime/sched -> go.opentelemetry.io/otel/exporters/prometheus",
		"examples/demo/plugin -> example.com/bad/runtime/catalog",
		"wire -> example.com/bad/sdk/abi",
		"builtin/broadcast -> example.com/bad/wire",
		"docs -> example.com/bad/runtime/sched",
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("violation not found: %s", w)
		}
		delete(got, w)
	}
	for extra := range got {
		t.Errorf("unexpected violation: %s", extra)
	}
	// Allowed imports in the same module are not reported.
	for _, v := range vs {
		if strings.Contains(v.File, "good.go") {
			t.Errorf("good.go reported: %s", v)
		}
	}
}
