package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPIDocsListEveryRoute keeps the role table of docs/api.md complete
// and true: every registered route has a row "| `METHOD /path` | role |"
// with the role it is registered with.
func TestAPIDocsListEveryRoute(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Data.InMemory = true
	h, err := Open(context.Background(), cfg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	var missing []string
	for _, r := range h.API().Routes() {
		row := fmt.Sprintf("| `%s %s` | %s |", r.Method, r.Path, r.Role)
		if !strings.Contains(string(doc), row) {
			missing = append(missing, row)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/api.md lacks these rows of the role table (or lists another role):\n%s", strings.Join(missing, "\n"))
	}
}
