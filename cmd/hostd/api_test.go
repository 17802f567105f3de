package main

import (
	"bytes"
	"testing"

	"github.com/hostd-dev/hostd/docs"
)

// TestAPISpecLocal: `hostd api spec --local` prints the OpenAPI document
// built into the binary, byte for byte, without a daemon.
func TestAPISpecLocal(t *testing.T) {
	out, errOut, code := runCLI(t, t.TempDir(), "api", "spec", "--local")
	if code != 0 || !bytes.Equal([]byte(out), docs.OpenAPI) {
		t.Fatalf("exit %d, %d bytes (want %d); stderr %s", code, len(out), len(docs.OpenAPI), errOut)
	}
}
