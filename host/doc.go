// Package host assembles a hostd daemon: configuration, logging,
// telemetry, the catalog, the features (broadcast, locks, mapping, plugins)
// and the HTTP API, with an ordered start and a graceful shutdown.
//
// # Lifecycle
//
//	h, err := host.Open(ctx, cfg, host.Options{})   // build everything, start nothing
//	err = h.Start(ctx)                                // the API serves, then components in order
//	...
//	err = h.Shutdown(ctx)                             // API drains, components stop in reverse,
//	                                                  // catalog and telemetry close
//
// Run does Start, waits for ctx (cmd/hostd cancels it on SIGINT/SIGTERM),
// then Shutdown with api.shutdown_timeout: in-flight requests finish, every
// goroutine ends.
//
// # Adding a feature
//
// A feature adds host/<feature>.go with
//
//	func openLocks(ctx context.Context, h *Host) error
//
// and one line in the features list in host.go. The opener builds its
// component from h.Config(), h.Catalog(), h.TracerProvider(),
// h.MeterProvider(), h.Logger() and h.Clock(); wires adapters between
// builtins (a builtin never imports another: it declares the interface it
// needs and host adapts); registers routes on h.API(); keeps what later
// features need in a field of Host; and registers its lifecycle:
//
//	h.AddComponent("locks", start, stop)
//
// Components start in registration order after every opener ran, and stop
// in reverse. Work that must finish before hostd may be called ready (crash
// recovery) takes a gate: done := h.ReadyGate("broadcast recovery"), and
// calls done() when finished; /readyz answers 503 naming the open gates
// until then. The API serves from the beginning of Start (so /healthz
// answers and /readyz says what it waits for: "start", "plugins" — the
// background plugin load, bounded by plugins.init_timeout per instance —
// and "broadcast recovery", which waits for the plugins).
//
// Everything that must be single-writer (the broadcast engine, a
// committer) is one component, so that a future replicated hostd starts it
// only on the elected replica.
package host
