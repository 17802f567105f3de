package host

import (
	"context"

	"github.com/hostd-dev/hostd/host/api"
)

// openTraces serves GET /v1/traces and GET /v1/traces/{id} from this
// daemon's own span files (<data.dir>/traces, written by the file
// exporter, telemetry.traces.exporter: file). With another exporter, or
// data.in_memory, the folder stays empty and the routes find nothing; the
// spans are in the backend the exporter sends them to.
func openTraces(_ context.Context, h *Host) error {
	api.RegisterTraces(h.API(), api.NewLocalTraces(h.Config().Data.Dir))
	return nil
}
