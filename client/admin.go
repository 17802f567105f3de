package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Backup streams an online backup of the daemon's whole catalog into w
// (POST /v1/admin/backup, role admin) and returns the catalog version of
// the snapshot. An error means w holds an incomplete backup: discard it.
func (c *Client) Backup(ctx context.Context, w io.Writer) (version uint64, err error) {
	resp, err := c.Raw(ctx, http.MethodPost, "/v1/admin/backup", nil, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return 0, fmt.Errorf("client: backup: %w", err)
	}
	// Trailers are complete once the body has been read to EOF.
	if msg := resp.Trailer.Get("Hostd-Backup-Error"); msg != "" {
		return 0, fmt.Errorf("client: backup failed on the server: %s", msg)
	}
	v := resp.Trailer.Get("Hostd-Backup-Version")
	if v == "" {
		return 0, fmt.Errorf("client: backup: the server did not confirm completion (connection cut?)")
	}
	version, err = strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("client: backup: bad version trailer %q", v)
	}
	return version, nil
}
