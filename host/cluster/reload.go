package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/host"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/wire"
)

// Plugin reload in a cluster: POST /v1/plugins/reload on any replica
// reaches every member (fanOut). Each member re-reads and re-hashes its
// plugin files, precompiles them into its compilation cache and rewrites
// its member record at once (GET /v1/cluster shows the new hashes); the
// leader also reloads its term Host's plugin runtime (the one that runs
// callbacks). The answer lists every member's outcome; its items and
// errors are the leader's runtime's, as an embedded daemon answers. When
// the leader refuses the reload (plugin_in_use) that refusal is the
// answer.

// reloadState serializes this replica's reloads and remembers the lease
// of its member record (so a reload can rewrite the record before it
// answers).
type reloadState struct {
	run sync.Mutex // one reload at a time on this replica

	mu    sync.Mutex
	lease clientv3.LeaseID
}

func (s *reloadState) setLease(id clientv3.LeaseID) {
	s.mu.Lock()
	s.lease = id
	s.mu.Unlock()
}

func (s *reloadState) currentLease() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

func (c *fileHashes) reset() {
	c.mu.Lock()
	c.seen = nil
	c.mu.Unlock()
}

// handleReload serves POST /v1/plugins/reload on the front server.
func (n *Node) handleReload(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get(HopHeader) != "" {
		return n.reloadSelf(w, r)
	}
	calls, err := n.fanOut(r, "plugin_reload", "/v1/plugins/reload")
	if err != nil {
		return err
	}
	n.mu.Lock()
	leader := ""
	if n.leader != nil {
		leader = n.leader.Name
	}
	n.mu.Unlock()
	out := wire.PluginReload{Items: []wire.Plugin{}, Errors: []wire.PluginLoadError{}}
	var refusal *memberCall
	for _, c := range calls {
		m := wire.PluginReloadMember{Name: c.member.Name, Address: c.member.Address, Leader: c.member.Name == leader, Outcome: c.outcome}
		if c.outcome == outcomeOK {
			var part wire.PluginReload
			if err := json.Unmarshal(c.body, &part); err != nil {
				m.Outcome, m.Error = outcomeError, fmt.Sprintf("undecodable answer: %v", err)
			} else {
				if len(part.Members) > 0 {
					pm := part.Members[0]
					m.Outcome, m.Error, m.Plugins, m.Errors = pm.Outcome, pm.Error, pm.Plugins, pm.Errors
				}
				if m.Leader {
					if part.Items != nil {
						out.Items = part.Items
					}
					if part.Errors != nil {
						out.Errors = part.Errors
					}
				}
			}
		} else if c.err != nil {
			m.Error = c.err.Error()
			if m.Leader && c.status/100 == 4 {
				refusal = c
			}
		}
		out.Members = append(out.Members, m)
	}
	if refusal != nil {
		var er wire.ErrorResponse
		if json.Unmarshal(refusal.body, &er) == nil && er.Error != nil {
			var parts []string
			for _, m := range out.Members {
				parts = append(parts, m.Name+": "+m.Outcome)
			}
			e := api.Errorf(refusal.status, er.Error.Code, "the leader %s refused the reload: %s", refusal.member.Name, er.Error.Message).
				With("members", strings.Join(parts, "; "))
			for k, v := range er.Error.Details {
				if k != "members" {
					e = e.With(k, v)
				}
			}
			return e
		}
	}
	return api.WriteJSON(w, http.StatusOK, out)
}

// reloadSelf is this replica's part of a reload: re-hash, precompile,
// and on the leader reload the term Host's runtime; then rewrite the
// member record.
func (n *Node) reloadSelf(w http.ResponseWriter, r *http.Request) error {
	n.reload.run.Lock()
	defer n.reload.run.Unlock()
	ctx := r.Context()
	select { // the start's precompile writes the same cache
	case <-n.precompiled:
	case <-ctx.Done():
		return api.Unavailable("this replica is still precompiling its plugins; retry")
	}
	me := wire.PluginReloadMember{Name: n.name, Address: n.advertise, Outcome: outcomeOK}
	n.hashes.reset()
	hashes, herr := n.pluginHashes()
	me.Plugins = hashes
	if herr != nil {
		me.Errors = append(me.Errors, loadErrors(herr)...)
	}
	n.mu.Lock()
	var th *host.Host
	if n.term != nil {
		th = n.term.host
		me.Leader = true
	}
	n.mu.Unlock()
	if th == nil { // the leader's runtime compiles as it reloads
		if err := host.PrecompilePlugins(ctx, n.cfg, n.cat.base()); err != nil {
			me.Errors = append(me.Errors, loadErrors(err)...)
		}
	}
	out := wire.PluginReload{Items: []wire.Plugin{}, Errors: []wire.PluginLoadError{}}
	if th != nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/plugins/reload", http.NoBody)
		if err != nil {
			return err
		}
		copyCallerHeaders(r.Context(), req.Header, r.Header)
		rec := &recorder{header: http.Header{}}
		th.ServeHTTP(rec, req)
		if rec.status/100 != 2 {
			// The runtime refused (plugin_in_use) or failed: its answer
			// is this member's answer.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.buf.Bytes())
			return nil
		}
		if err := json.Unmarshal(rec.buf.Bytes(), &out); err != nil {
			return fmt.Errorf("cluster: the term's reload answer: %w", err)
		}
		// The runtime's verdict on each file replaces the precompile's.
		me.Errors = out.Errors
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.Catalog.Etcd.RequestTimeout)
	defer cancel()
	if err := n.writeMemberRecord(wctx); err != nil {
		me.Errors = append(me.Errors, wire.PluginLoadError{Message: "the member record (GET /v1/cluster) was not updated: " + err.Error()})
	}
	n.mu.Lock()
	n.notifyLocked() // keepMember rewrites the record too
	n.mu.Unlock()
	if len(me.Errors) > 0 {
		me.Outcome = outcomeError
		me.Error = fmt.Sprintf("%d plugin file(s) failed", len(me.Errors))
	}
	n.log.Info("plugins reloaded", "leader", me.Leader, "plugins", len(hashes), "errors", len(me.Errors))
	out.Members = []wire.PluginReloadMember{me}
	return api.WriteJSON(w, http.StatusOK, out)
}

// writeMemberRecord writes this replica's member record now, on its
// session's lease.
func (n *Node) writeMemberRecord(ctx context.Context) error {
	lease := n.reload.currentLease()
	if lease == clientv3.NoLease {
		return errors.New("no etcd session yet")
	}
	raw, err := json.Marshal(n.memberRecord())
	if err != nil {
		return err
	}
	_, err = n.cli.Put(ctx, n.membersPrefix()+n.name, string(raw), clientv3.WithLease(lease))
	return err
}

// loadErrors splits a joined plugin error into one entry per plugin
// ("plugin NAME: ...").
func loadErrors(err error) []wire.PluginLoadError {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]wire.PluginLoadError, 0, len(errs))
	for _, e := range errs {
		msg := e.Error()
		le := wire.PluginLoadError{Message: msg}
		if rest, ok := strings.CutPrefix(msg, "plugin "); ok {
			if name, m, ok := strings.Cut(rest, ": "); ok && !strings.ContainsAny(name, " ") {
				le.Plugin, le.Message = name, m
			}
		}
		out = append(out, le)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Plugin < out[j].Plugin })
	return out
}
