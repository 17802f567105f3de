package host

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

// Trailers of POST /v1/admin/backup. The backup streams, so its outcome is
// known only after the body: the server sets TrailerBackupError when the
// backup failed midway (the body is then incomplete), and
// TrailerBackupVersion, the catalog version of the snapshot, when it
// succeeded.
const (
	TrailerBackupError   = "Hostd-Backup-Error"
	TrailerBackupVersion = "Hostd-Backup-Version"
)

// openAdmin registers the daemon's administrative operations.
func openAdmin(_ context.Context, h *Host) error {
	b, ok := h.store.(catalog.Backuper)
	if !ok {
		return fmt.Errorf("host: the catalog (%T) cannot stream backups", h.store)
	}
	h.api.Handle("POST /v1/admin/backup", api.RoleAdmin, func(w http.ResponseWriter, r *http.Request) error {
		start := time.Now()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="hostd.backup"`)
		w.Header().Set("Trailer", TrailerBackupError+", "+TrailerBackupVersion)
		w.WriteHeader(http.StatusOK)
		ver, err := b.Backup(r.Context(), w)
		if err != nil {
			w.Header().Set(TrailerBackupError, err.Error())
			h.log.Error("backup failed", "err", err, "principal", principalName(r))
			return nil // the status is sent; the trailer carries the failure
		}
		w.Header().Set(TrailerBackupVersion, strconv.FormatUint(uint64(ver), 10))
		h.log.Info("backup streamed", "version", uint64(ver), "duration", time.Since(start), "principal", principalName(r))
		return nil
	}, api.WithTimeout(-1))
	// A cluster replica's front server answers GET /v1/cluster itself;
	// the embedded daemon (and a term's Host behind that front) says what
	// it is, so `hostd cluster status` is clear against either.
	h.api.Handle("GET /v1/cluster", api.RoleRead, func(w http.ResponseWriter, r *http.Request) error {
		return api.NotFound("this hostd runs embedded (catalog.backend: %s): it is not part of a cluster", h.cfg.Catalog.Backend).
			With("reason", "embedded")
	})
	return nil
}

func principalName(r *http.Request) string {
	p, _ := api.PrincipalFrom(r.Context())
	return p.Name
}
