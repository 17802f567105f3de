package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostd-dev/hostd/builtin/locks"
	"github.com/hostd-dev/hostd/host/api"
)

// openLocks builds the lease-lock service (grants restored from the
// catalog with the restart rule of docs/locks) and the presence table, and
// registers their routes. The broadcast engine's resource-key locker is a
// separate key space, built in host/broadcast.go.
func openLocks(ctx context.Context, h *Host) error {
	cfg := h.Config().Locks
	svc, err := locks.Open(ctx, locks.Options{
		Store:          h.Catalog(),
		Clock:          h.Clock(),
		DefaultTTL:     cfg.DefaultTTL,
		MaxTTL:         cfg.MaxTTL,
		TracerProvider: h.TracerProvider(),
		MeterProvider:  h.MeterProvider(),
		Logger:         h.Logger().With("component", "locks"),
		Takeover:       h.opts.Takeover,
	})
	if err != nil {
		return fmt.Errorf("open lease locks: %w", err)
	}
	pres := locks.NewPresence(locks.PresenceOptions{
		Clock: h.Clock(), DefaultTTL: cfg.DefaultTTL, MaxTTL: cfg.MaxTTL,
		TracerProvider: h.TracerProvider(), MeterProvider: h.MeterProvider(),
	})
	h.leases, h.presence = svc, pres
	api.RegisterLocks(h.API(), svc, pres)
	h.AddComponent("locks", nil, func(context.Context) error {
		pres.Close()
		return errors.Join(svc.Close())
	})
	return nil
}
