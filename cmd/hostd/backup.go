package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/host/config"
	"github.com/hostd-dev/hostd/runtime/catalog"
)

func newBackupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "backup FILE",
		Short: "Save an online backup of the running daemon's catalog to FILE (admin)",
		Long: `Stream a consistent snapshot of the whole catalog (broadcasts, locks,
topics, queues, plugin KV, sequences) from the daemon at --addr into FILE,
while the daemon keeps serving. FILE is written to FILE.tmp first and
renamed only when the backup is complete, so an interrupted backup never
leaves a partial FILE. Restore it with "hostd restore FILE --data-dir DIR".`,
		Example: "  hostd backup hostd-2026-11-30.backup --token $ADMIN_TOKEN",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			file := args[0]
			tmp := file + ".tmp"
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			ok := false
			defer func() {
				if !ok {
					f.Close()
					os.Remove(tmp)
				}
			}()
			ver, err := c.Backup(cmd.Context(), f)
			if err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			if err := os.Rename(tmp, file); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			ok = true
			fi, _ := os.Stat(file)
			size := int64(0)
			if fi != nil {
				size = fi.Size()
			}
			out := map[string]any{"file": file, "bytes": size, "version": ver}
			return g.print(out, []string{"FILE", "BYTES", "VERSION"},
				[][]string{{file, fmt.Sprint(size), fmt.Sprint(ver)}})
		},
	}
}

func newRestoreCmd(g *globals) *cobra.Command {
	var dataDir, file string
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup into an empty data directory (offline)",
		Long: `Create a data directory from a backup made by "hostd backup". This is
offline: the directory must not exist or be empty, so no running hostd can
be using it. A truncated or corrupted backup is refused and nothing is
left behind. Then start hostd on it: hostd serve --data-dir DIR.

The directory is --data-dir, else data.dir from --config / HOSTD_DATA__DIR,
else ./hostd-data.`,
		Example: "  hostd restore hostd-2026-11-30.backup --data-dir /var/lib/hostd",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			flags := map[string]any{}
			if dataDir != "" {
				flags["data.dir"] = dataDir
			}
			cfg, err := config.Load(config.Source{File: file, Flags: flags})
			if err != nil {
				return err
			}
			in, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			defer in.Close()
			dir := cfg.Data.Dir
			if err := catalog.Restore(dir, in); err != nil {
				if errors.Is(err, catalog.ErrBackup) {
					return fmt.Errorf("restore: %s is not a complete hostd backup: %w", args[0], err)
				}
				return fmt.Errorf("restore: %w", err)
			}
			abs, _ := filepath.Abs(dir)
			out := map[string]any{"data_dir": abs, "from": args[0]}
			if g.output == "json" {
				return g.print(out, nil, nil)
			}
			_, err = fmt.Fprintf(g.stdout, "restored %s into %s; start it with: hostd serve --data-dir %s\n", args[0], abs, abs)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "data directory to create (default: data.dir, ./hostd-data)")
	cmd.Flags().StringVarP(&file, "config", "c", "", "YAML config file to take data.dir from")
	return cmd
}
