package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostd-dev/hostd/client"
)

// parseLockKey parses "DOMAIN:KEY" (split at the first colon).
func parseLockKey(s, mode string) (client.LockKey, error) {
	d, k, ok := strings.Cut(s, ":")
	if !ok || d == "" || k == "" {
		return client.LockKey{}, fmt.Errorf("invalid argument %q: keys are DOMAIN:KEY, e.g. collection:db1.users", s)
	}
	return client.LockKey{Domain: d, Key: k, Mode: mode}, nil
}

func parseMeta(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid argument %q for --meta: want KEY=VALUE", kv)
		}
		m[k] = v
	}
	return m, nil
}

func defaultOwner() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// tableTime is how CLI tables show a time: local, to the millisecond
// (expiries, retries and finishes a fraction of a second apart must not
// look equal).
const tableTime = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(tableTime)
}

func fmtMeta(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func fmtKeys(ks []client.LockKey) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k.Domain + ":" + k.Key
		if k.Mode == "shared" {
			parts[i] += "(s)"
		}
	}
	return strings.Join(parts, " ")
}

func grantRows(gs []client.LockGrant, token bool) ([]string, [][]string) {
	header := []string{"ID", "OWNER", "KEYS", "FENCE", "TTL", "EXPIRES", "META"}
	if token {
		header = append(header, "TOKEN")
	}
	var rows [][]string
	for _, g := range gs {
		r := []string{g.ID, g.Owner, fmtKeys(g.Keys), strconv.FormatUint(g.Fence, 10), g.TTL, fmtTime(g.ExpiresAt), fmtMeta(g.Meta)}
		if token {
			r = append(r, g.Token)
		}
		rows = append(rows, r)
	}
	return header, rows
}

func newLockCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lock",
		Short: "Lease locks with fencing: acquire, renew, release, list, inspect, force-release",
		Long: `Lease locks are durable, TTL'd, multi-key (all or nothing) locks with fencing
tokens. Keys are DOMAIN:KEY; exclusive unless given with --shared. Keep the
grant's id and token to renew and release it (--grant-token, or
HOSTD_GRANT_TOKEN; the global --token stays the API bearer token), and pass
its fence to the resource you protect.`,
	}
	cmd.AddCommand(newLockAcquireCmd(g), newLockRenewCmd(g), newLockReleaseCmd(g), newLockListCmd(g),
		newLockInspectCmd(g), newLockForceReleaseCmd(g), newLockAuditCmd(g), newLockCheckFenceCmd(g))
	return cmd
}

func newLockAcquireCmd(g *globals) *cobra.Command {
	var shared, meta []string
	var owner, ttl, wait, idem string
	cmd := &cobra.Command{
		Use:   "acquire [DOMAIN:KEY...]",
		Short: "Acquire a lease on keys (exclusive, or --shared DOMAIN:KEY), all or nothing",
		Example: `  hostd lock acquire service:api --ttl 1m --wait 10s --meta ticket=OPS-7
  hostd lock acquire collection:db1.users --shared database:db1`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := client.AcquireLock{Owner: owner, TTL: ttl, Wait: wait, IdempotencyKey: idem}
			for _, a := range args {
				k, err := parseLockKey(a, "exclusive")
				if err != nil {
					return err
				}
				req.Keys = append(req.Keys, k)
			}
			for _, a := range shared {
				k, err := parseLockKey(a, "shared")
				if err != nil {
					return err
				}
				req.Keys = append(req.Keys, k)
			}
			if len(req.Keys) == 0 {
				return fmt.Errorf("requires at least one key (DOMAIN:KEY or --shared DOMAIN:KEY)")
			}
			var err error
			if req.Meta, err = parseMeta(meta); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			gr, err := c.AcquireLock(cmd.Context(), req)
			if err != nil {
				return lockCLIError(err)
			}
			h, rows := grantRows([]client.LockGrant{*gr}, true)
			return g.print(gr, h, rows)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&shared, "shared", nil, "a key to take in shared mode (repeatable)")
	f.StringVar(&owner, "owner", defaultOwner(), "holder name shown to others")
	f.StringVar(&ttl, "ttl", "", "lease TTL, e.g. 30s (default: the server's locks.default_ttl)")
	f.StringVar(&wait, "wait", "", "how long to queue for the keys, e.g. 10s (default: fail at once)")
	f.StringArrayVar(&meta, "meta", nil, "holder metadata KEY=VALUE (repeatable)")
	f.StringVar(&idem, "idempotency-key", "", "a retry of the same request with this key, by the same API token, returns the same grant")
	return cmd
}

// grantTokenFlag adds --grant-token (env HOSTD_GRANT_TOKEN): the grant's
// secret, distinct from the global bearer --token (HOSTD_TOKEN) that
// authenticates the request.
func grantTokenFlag(cmd *cobra.Command, token *string) {
	cmd.Flags().StringVar(token, "grant-token", os.Getenv("HOSTD_GRANT_TOKEN"),
		"the grant's token from its acquire (env HOSTD_GRANT_TOKEN; required); --token is the API bearer token")
}

func needGrantToken(token string) error {
	if token == "" {
		return withCode(exitUsage, errors.New("the grant's token is required: --grant-token or HOSTD_GRANT_TOKEN (--token is the API bearer token)"))
	}
	return nil
}

func newLockRenewCmd(g *globals) *cobra.Command {
	var token, ttl string
	cmd := &cobra.Command{
		Use:   "renew ID --grant-token TOKEN",
		Short: "Extend a lease (fails with expired once its TTL ran out)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needGrantToken(token); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			gr, err := c.RenewLock(cmd.Context(), args[0], token, ttl)
			if err != nil {
				return lockCLIError(err)
			}
			h, rows := grantRows([]client.LockGrant{*gr}, false)
			return g.print(gr, h, rows)
		},
	}
	grantTokenFlag(cmd, &token)
	cmd.Flags().StringVar(&ttl, "ttl", "", "new TTL from now, 1ms..locks.max_ttl (default: the grant's TTL)")
	return cmd
}

func newLockReleaseCmd(g *globals) *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:   "release ID --grant-token TOKEN",
		Short: "Release a lease (a wrong token changes nothing; releasing twice is a no-op)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needGrantToken(token); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.ReleaseLock(cmd.Context(), args[0], token); err != nil {
				return lockCLIError(err)
			}
			return g.print(map[string]any{"released": args[0]}, nil, [][]string{{"released " + args[0]}})
		},
	}
	grantTokenFlag(cmd, &token)
	return cmd
}

func newLockListCmd(g *globals) *cobra.Command {
	var p client.Page
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List live grants (never their tokens)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			l, err := c.ListLocks(cmd.Context(), p)
			if err != nil {
				return lockCLIError(err)
			}
			h, rows := grantRows(l.Items, false)
			if l.NextPageToken != "" && g.output != "json" {
				rows = append(rows, []string{"(more: --page-token " + l.NextPageToken + ")"})
			}
			return g.print(l, h, rows)
		},
	}
	cmd.Flags().IntVar(&p.Limit, "limit", 0, "page size (default 100, max 1000)")
	cmd.Flags().StringVar(&p.Token, "page-token", "", "continue from a previous page")
	return cmd
}

func newLockInspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect DOMAIN:KEY",
		Short: "Show a key's holders (mode, fence, expiry, owner, meta) and waiters",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := parseLockKey(args[0], "")
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			st, err := c.InspectLock(cmd.Context(), k.Domain, k.Key)
			if err != nil {
				return lockCLIError(err)
			}
			rows := [][]string{}
			for _, h := range st.Holders {
				rows = append(rows, []string{"holder", h.GrantID, h.Owner, h.Mode, strconv.FormatUint(h.Fence, 10), fmtTime(h.ExpiresAt), fmtMeta(h.Meta)})
			}
			for _, w := range st.Waiters {
				rows = append(rows, []string{"waiter", "-", w.Owner, w.Mode, "-", "since " + fmtTime(w.Since), fmtMeta(w.Meta)})
			}
			return g.print(st, []string{"ROLE", "GRANT", "OWNER", "MODE", "FENCE", "EXPIRES", "META"}, rows)
		},
	}
}

func newLockForceReleaseCmd(g *globals) *cobra.Command {
	var reason, grant string
	cmd := &cobra.Command{
		Use:   "force-release DOMAIN:KEY",
		Short: "Evict a key's holders (admin): bumps the fence and writes an audit record",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := parseLockKey(args[0], "")
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.ForceReleaseLock(cmd.Context(), k.Domain, k.Key, grant, reason)
			if err != nil {
				return lockCLIError(err)
			}
			h, rows := grantRows(res.Evicted, false)
			rows = append(rows, []string{"new fence: " + strconv.FormatUint(res.Fence, 10)})
			return g.print(res, h, rows)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit log; required)")
	cmd.Flags().StringVar(&grant, "grant", "", "evict only this grant id (default: every holder)")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func newLockAuditCmd(g *globals) *cobra.Command {
	var p client.Page
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the force-release audit log",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			l, err := c.LockAuditLog(cmd.Context(), p)
			if err != nil {
				return lockCLIError(err)
			}
			var rows [][]string
			for _, a := range l.Items {
				rows = append(rows, []string{strconv.FormatUint(a.ID, 10), fmtTime(a.At), a.Key.Domain + ":" + a.Key.Key, a.GrantID, a.Owner,
					fmt.Sprintf("%d->%d", a.OldFence, a.NewFence), a.Actor, a.Reason})
			}
			return g.print(l, []string{"ID", "AT", "KEY", "GRANT", "OWNER", "FENCE", "ACTOR", "REASON"}, rows)
		},
	}
	cmd.Flags().IntVar(&p.Limit, "limit", 0, "page size (default 100, max 1000)")
	cmd.Flags().StringVar(&p.Token, "page-token", "", "continue from a previous page")
	return cmd
}

func newLockCheckFenceCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check-fence DOMAIN:KEY FENCE",
		Short: "Exit 0 if FENCE is a current holder's fence of the key, else not_holder",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := parseLockKey(args[0], "")
			if err != nil {
				return err
			}
			f, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil {
				return fmt.Errorf("invalid argument %q: FENCE must be a number", args[1])
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.CheckFence(cmd.Context(), k.Domain, k.Key, f); err != nil {
				return lockCLIError(err)
			}
			return g.print(map[string]any{"current": true}, nil, [][]string{{"current"}})
		},
	}
}

// lockCLIError adds the holders to a locked error's message.
func lockCLIError(err error) error {
	ce, ok := err.(*client.Error)
	if !ok || ce.Code != "locked" {
		return err
	}
	hs, _ := ce.Details["holders"].([]any)
	var names []string
	for _, h := range hs {
		if m, ok := h.(map[string]any); ok {
			names = append(names, fmt.Sprintf("%v (grant %v)", m["owner"], m["grant_id"]))
		}
	}
	if len(names) == 0 {
		return err
	}
	return fmt.Errorf("%w; holders: %s", err, strings.Join(names, ", "))
}
