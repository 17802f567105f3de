package catalog

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// removeEmptyLogFiles deletes zero-length value-log (*.vlog) and memtable
// (*.mem) files from dir before Badger opens it.
//
// Badger creates these files and then sizes them; when that fails (no room
// on the disk, a file-size limit), it leaves an empty file behind, and every
// later open of the directory fails with "Open existing file … Create a new
// file" even when there is room again. A healthy file is never empty (a
// value log keeps at least its header; a memtable file is preallocated), so
// an empty one holds no data and removing it loses nothing.
func removeEmptyLogFiles(dir string, log *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("catalog: read data directory %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".vlog") || strings.HasSuffix(name, ".mem")) {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Size() != 0 {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("catalog: remove empty log file %s left by an earlier failed start: %w", p, err)
		}
		log.Warn("removed an empty log file left by an earlier failed start", "file", p)
	}
	return nil
}
