package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Badger's and glog's package-level goroutines, started once per process.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// testConfig is a daemon on a free loopback port with data in a temp dir.
func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.API.Listen = "127.0.0.1:0"
	cfg.Data.Dir = t.TempDir()
	cfg.API.ShutdownTimeout = 5 * time.Second
	// A Go guest starts in milliseconds, but this machine may be
	// overloaded (parallel race-enabled test packages).
	cfg.Plugins.InitTimeout = 2 * time.Minute
	return &cfg
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startHost opens and starts a Host and shuts it down at the end of the
// test. Every API exchange is checked against docs/openapi.json.
func startHost(t *testing.T, cfg *config.Config) *Host {
	t.Helper()
	h, err := Open(context.Background(), cfg, Options{Logger: quietLogger(), WrapAPI: specCheck(t)})
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
	return h
}

func TestDaemonInProcess(t *testing.T) {
	h := startHost(t, testConfig(t))
	c, err := client.New(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Version(ctx); err != nil || v.GoVersion == "" {
		t.Fatalf("version: %+v %v", v, err)
	}
	// The catalog works through the Host.
	if _, err := h.Catalog().NextSequence(ctx, "host-test", 1); err != nil {
		t.Fatalf("catalog: %v", err)
	}
	// /metrics serves Prometheus text including the API's own histogram.
	res, err := c.Raw(ctx, "GET", "/metrics", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "http_server_request_duration_seconds") || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("/metrics lacks expected series:\n%.2000s", body)
	}
}

func TestSecondInstanceSameDataDirFails(t *testing.T) {
	cfg := testConfig(t)
	first := startHost(t, cfg)
	cfg2 := *cfg
	_, err := Open(context.Background(), &cfg2, Options{Logger: quietLogger()})
	if !errors.Is(err, catalog.ErrLocked) {
		t.Fatalf("second Open: want ErrLocked, got %v", err)
	}
	if !strings.Contains(err.Error(), cfg.Data.Dir) {
		t.Fatalf("error does not name the data directory %s: %v", cfg.Data.Dir, err)
	}
	c, _ := client.New(first.URL())
	if err := c.Health(context.Background()); err != nil {
		t.Fatalf("first instance stopped answering: %v", err)
	}
}

func TestComponentsOrderAndReadiness(t *testing.T) {
	cfg := testConfig(t)
	cfg.Data.InMemory = true
	h, err := Open(context.Background(), cfg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []string
	rec := func(e string) func(context.Context) error {
		return func(context.Context) error {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
			return nil
		}
	}
	h.AddComponent("a", rec("start a"), rec("stop a"))
	h.AddComponent("b", rec("start b"), rec("stop b"))
	h.AddComponent("c", nil, rec("stop c"))
	done := h.ReadyGate("recovery")
	if h.Ready() {
		t.Fatal("ready before Start")
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(h.URL())
	err = c.Ready(context.Background())
	if !client.HasCode(err, api.CodeUnavailable) || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("readyz with an open gate: %v", err)
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		if w, _ := ce.Details["waiting"].([]any); len(w) != 1 || w[0] != "recovery" {
			t.Fatalf("waiting: %v", ce.Details)
		}
	}
	done()
	done() // idempotent
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("readyz after the gate: %v", err)
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "start a,start b,stop c,stop b,stop a"
	if got := strings.Join(events, ","); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
}

func TestStartFailureStopsStartedComponents(t *testing.T) {
	cfg := testConfig(t)
	cfg.Data.InMemory = true
	h, err := Open(context.Background(), cfg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var stopped []string
	h.AddComponent("good", nil, func(context.Context) error { stopped = append(stopped, "good"); return nil })
	h.AddComponent("bad", func(context.Context) error { return errors.New("no disk") }, func(context.Context) error {
		stopped = append(stopped, "bad")
		return nil
	})
	err = h.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "start bad") || !strings.Contains(err.Error(), "no disk") {
		t.Fatalf("Start: %v", err)
	}
	if strings.Join(stopped, ",") != "good" {
		t.Fatalf("stopped %v, want only good", stopped)
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestGracefulShutdownInFlight: Run's shutdown (as on SIGINT) lets an
// in-flight request finish, then every goroutine ends (TestMain's goleak).
func TestGracefulShutdownInFlight(t *testing.T) {
	cfg := testConfig(t)
	h, err := Open(context.Background(), cfg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	h.API().Handle("POST /v1/test/slow", api.RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		close(entered)
		time.Sleep(300 * time.Millisecond)
		return api.WriteJSON(w, http.StatusOK, map[string]bool{"finished": true})
	})
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- h.Run(ctx) }()
	var c *client.Client
	deadline := time.Now().Add(60 * time.Second) // Run recovers and loads before it is ready: slow under -race and load
	for h.URL() == "" || c == nil {
		if time.Now().After(deadline) {
			t.Fatal("host did not start")
		}
		time.Sleep(5 * time.Millisecond)
		if h.Ready() && h.URL() != "" {
			c, _ = client.New(h.URL())
		}
	}
	result := make(chan error, 1)
	var out map[string]bool
	go func() { result <- c.Do(context.Background(), "POST", "/v1/test/slow", map[string]int{}, &out) }()
	<-entered
	cancel() // as SIGINT does
	if err := <-result; err != nil || !out["finished"] {
		t.Fatalf("in-flight request: %v %v", out, err)
	}
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := c.Health(context.Background()); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

func TestOpenRejectsInvalidConfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.API.Listen = "0.0.0.0:0"
	cfg.Log.Level = "loud"
	_, err := Open(context.Background(), cfg, Options{Logger: quietLogger()})
	var ve *config.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 2 {
		t.Fatalf("want 2 problems, got %v", err)
	}
}

// TestDaemonFromConfigFile: the whole path a user takes — a YAML file on
// disk, loaded and validated, then the daemon on port 0 with tokens.
func TestDaemonFromConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hostd.yaml")
	yaml := fmt.Sprintf(`
api:
  listen: 127.0.0.1:0
  max_body_bytes: 64KiB
  tokens:
    - {name: ci, token: ci-secret-0123456789, role: write}
data:
  dir: %s
log:
  level: warn
  format: json
`, filepath.Join(dir, "data"))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Source{File: file, Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	h := startHost(t, cfg)
	anon, _ := client.New(h.URL())
	if err := anon.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Version(context.Background()); !client.HasCode(err, api.CodeUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
	ci, _ := client.New(h.URL(), client.WithToken("ci-secret-0123456789"))
	if _, err := ci.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	var sink bytes.Buffer
	if _, err := ci.Backup(context.Background(), &sink); !client.HasCode(err, api.CodePermissionDenied) {
		t.Fatalf("write token on an admin operation: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Fatalf("data dir from the file not used: %v", err)
	}
}

// TestBusyPortFailsBeforeComponents: the listen address is bound before
// any component starts, so a busy port costs no recovery work.
func TestBusyPortFailsBeforeComponents(t *testing.T) {
	first := startHost(t, testConfig(t))
	cfg := testConfig(t)
	cfg.API.Listen = first.API().Addr().String()
	h, err := Open(context.Background(), cfg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	started := false
	h.AddComponent("probe", func(context.Context) error { started = true; return nil }, nil)
	err = h.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), cfg.API.Listen) {
		t.Fatalf("Start on a busy port: %v", err)
	}
	if started {
		t.Fatal("a component started although the port was busy")
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
