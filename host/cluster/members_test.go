package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/wire"
)

// A plugin that differs between members, one a member lacks, and mixed
// versions are each reported; identical members report nothing.
func TestDriftReportsPluginAndVersionDifferences(t *testing.T) {
	same := []wire.ClusterMember{
		{Name: "a", Version: "v1", Plugins: map[string]string{"p": "aaaa"}},
		{Name: "b", Version: "v1", Plugins: map[string]string{"p": "aaaa"}},
	}
	if got := drift(same); len(got) != 0 {
		t.Fatalf("identical members: %q", got)
	}
	ms := []wire.ClusterMember{
		{Name: "a", Version: "v1", Plugins: map[string]string{"p": "aaaa", "q": "cccc"}},
		{Name: "b", Version: "v2", Plugins: map[string]string{"p": "bbbb"}},
	}
	got := strings.Join(drift(ms), "\n")
	for _, want := range []string{"plugin p differs between members: aaaa on a; bbbb on b",
		"plugin q differs between members: (missing) on b; cccc on a", "different versions"} {
		if !strings.Contains(got, want) {
			t.Errorf("drift lacks %q in:\n%s", want, got)
		}
	}
}

// A plugin file's hash is recomputed when the file changes, not on every
// probe.
func TestFileHashesFollowChanges(t *testing.T) {
	var c fileHashes
	p := filepath.Join(t.TempDir(), "x.wasm")
	if err := os.WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	h1, err := c.of(p)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.of(p); again != h1 {
		t.Fatalf("hash changed without a change: %s %s", h1, again)
	}
	if err := os.WriteFile(p, []byte("two!"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute)
	if err := os.Chtimes(p, future, future); err != nil {
		t.Fatal(err)
	}
	h2, err := c.of(p)
	if err != nil || h2 == h1 {
		t.Fatalf("after a change: %s %v (was %s)", h2, err, h1)
	}
	if _, err := c.of(filepath.Join(t.TempDir(), "gone.wasm")); err == nil {
		t.Fatal("a missing file has a hash")
	}
}
