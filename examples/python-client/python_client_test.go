package pythonclient

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/internal/apispec"
)

// TestPythonClient runs hostd_client.py, a client written from
// docs/openapi.json with Python's standard library only, against a real
// daemon: topic create, broadcast, channel append and read, lease acquire
// and release, an error case. Every exchange is also validated against the
// spec on the server side.
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (.ci/run installs it)")
	}
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.Data.Dir = t.TempDir()
	cfg.Mapping.Brokers = []config.MappingBroker{{Name: "a"}}
	spec := apispec.MustLoad()
	h, err := host.Open(context.Background(), &cfg, host.Options{
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		WrapAPI: func(next http.Handler) http.Handler { return spec.Handler(t, true, next) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "hostd_client.py", h.URL()).CombinedOutput()
	t.Logf("hostd_client.py:\n%s", out)
	if err != nil {
		t.Fatalf("hostd_client.py: %v", err)
	}
}
