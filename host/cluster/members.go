package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/wire"
)

// memberRefresh is how often a replica rewrites its member record (ready,
// plugin hashes) while its session lives.
const memberRefresh = 5 * time.Second

// keepMember writes this replica's member record on the session's lease
// (it disappears with the session) and refreshes it until done.
func (n *Node) keepMember(ctx context.Context, sess *concurrency.Session, done <-chan struct{}) {
	key := n.membersPrefix() + n.name
	n.reload.setLease(sess.Lease()) // a plugin reload rewrites the record at once
	var last []byte
	for {
		rec := n.memberRecord()
		raw, _ := json.Marshal(rec)
		if string(raw) != string(last) {
			rctx, cancel := context.WithTimeout(ctx, n.cfg.Catalog.Etcd.RequestTimeout)
			_, err := n.cli.Put(rctx, key, string(raw), clientv3.WithLease(sess.Lease()))
			cancel()
			if err == nil {
				last = raw
			} else if ctx.Err() == nil {
				n.log.Warn("cannot write the member record", "err", err)
			}
		}
		n.mu.Lock()
		changed := n.changed
		n.mu.Unlock()
		t := time.NewTimer(memberRefresh)
		select {
		case <-done:
			t.Stop()
			return
		case <-sess.Done():
			t.Stop()
			return
		case <-changed:
			t.Stop()
		case <-t.C:
		}
	}
}

func (n *Node) memberRecord() wire.ClusterMember {
	hashes, _ := n.pluginHashes()
	n.mu.Lock()
	leading := n.term != nil && n.term.host != nil
	n.mu.Unlock()
	return wire.ClusterMember{
		Name: n.name, Address: n.advertise, Version: n.opts.Version.Version,
		Ready: len(n.notReady()) == 0, Leader: leading, Plugins: hashes, Since: n.joined,
	}
}

// pluginHashes are the SHA-256 of the .wasm files this replica would load:
// every *.wasm in plugins.dir and every plugins.list path.
func (n *Node) pluginHashes() (map[string]string, error) {
	pc := n.cfg.Plugins
	dir := pc.Dir
	if dir == "" {
		dir = filepath.Join(n.cfg.Data.Dir, "plugins")
	}
	files := map[string]string{}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".wasm") {
				files[strings.TrimSuffix(e.Name(), ".wasm")] = filepath.Join(dir, e.Name())
			}
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	for _, p := range pc.List {
		name, path := p.Name, p.Path
		if path == "" {
			path = filepath.Join(dir, name+".wasm")
		}
		if name == "" {
			name = strings.TrimSuffix(filepath.Base(path), ".wasm")
		}
		files[name] = path
	}
	out := make(map[string]string, len(files))
	var firstErr error
	for name, path := range files {
		sum, err := n.hashes.of(path)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("plugin %s: %w", name, err)
			}
			continue
		}
		out[name] = sum
	}
	return out, firstErr
}

// fileHashes remembers each plugin file's SHA-256 by path, size and
// modification time: /readyz probes and the member record ask every few
// seconds, and a plugin file is megabytes.
type fileHashes struct {
	mu   sync.Mutex
	seen map[string]fileHash
}

type fileHash struct {
	size int64
	mod  time.Time
	sum  string
}

func (c *fileHashes) of(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	h, ok := c.seen[path]
	c.mu.Unlock()
	if ok && h.size == st.Size() && h.mod.Equal(st.ModTime()) {
		return h.sum, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sh := sha256.New()
	if _, err := io.Copy(sh, f); err != nil {
		return "", err
	}
	h = fileHash{size: st.Size(), mod: st.ModTime(), sum: hex.EncodeToString(sh.Sum(nil))}
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]fileHash{}
	}
	c.seen[path] = h
	c.mu.Unlock()
	return h.sum, nil
}

// notReady lists what this replica waits for (/readyz): a leader; its
// plugin files, read and precompiled; on the leader, its term's recovery.
func (n *Node) notReady() []string {
	var out []string
	if _, err := n.pluginHashes(); err != nil {
		out = append(out, "plugins")
	} else {
		select {
		case <-n.precompiled:
		default:
			out = append(out, "plugins")
		}
	}
	n.mu.Lock()
	li, leading := n.leader, n.term != nil
	var h interface{ NotReady() []string }
	if leading && n.term.host != nil {
		h = n.term.host
	}
	n.mu.Unlock()
	switch {
	case leading && h == nil:
		out = append(out, "term-start")
	case leading:
		out = append(out, h.NotReady()...)
	case li == nil:
		out = append(out, "leader")
	}
	sort.Strings(out)
	return out
}

// handleCluster serves GET /v1/cluster.
func (n *Node) handleCluster(w http.ResponseWriter, r *http.Request) error {
	resp, err := n.cli.Get(r.Context(), n.membersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return api.Unavailable("cannot read the members from etcd: %v", err)
	}
	out := wire.Cluster{Self: n.name, Members: []wire.ClusterMember{}, Problems: []string{}}
	n.mu.Lock()
	if li := n.leader; li != nil {
		out.Leader = &wire.ClusterLeader{Name: li.Name, Address: li.Address, Term: li.term, Since: li.since}
	}
	n.mu.Unlock()
	for _, kv := range resp.Kvs {
		var m wire.ClusterMember
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("member record %s is not readable: %v", kv.Key, err))
			continue
		}
		if m.Plugins == nil {
			m.Plugins = map[string]string{}
		}
		m.Leader = out.Leader != nil && m.Name == out.Leader.Name
		out.Members = append(out.Members, m)
	}
	slices.SortFunc(out.Members, func(a, b wire.ClusterMember) int { return strings.Compare(a.Name, b.Name) })
	out.Problems = append(out.Problems, drift(out.Members)...)
	return api.WriteJSON(w, http.StatusOK, out)
}

// drift reports plugins whose hash differs between members, or that some
// members lack, and members running another version.
func drift(ms []wire.ClusterMember) []string {
	var probs []string
	names := map[string]bool{}
	for _, m := range ms {
		for p := range m.Plugins {
			names[p] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for p := range names {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		byHash := map[string][]string{}
		for _, m := range ms {
			h := m.Plugins[p]
			if h == "" {
				h = "(missing)"
			} else {
				h = h[:min(12, len(h))]
			}
			byHash[h] = append(byHash[h], m.Name)
		}
		if len(byHash) > 1 {
			var parts []string
			for h, who := range byHash {
				parts = append(parts, h+" on "+strings.Join(who, ","))
			}
			sort.Strings(parts)
			probs = append(probs, fmt.Sprintf("plugin %s differs between members: %s", p, strings.Join(parts, "; ")))
		}
	}
	versions := map[string][]string{}
	for _, m := range ms {
		versions[m.Version] = append(versions[m.Version], m.Name)
	}
	if len(versions) > 1 {
		var parts []string
		for v, who := range versions {
			parts = append(parts, v+" on "+strings.Join(who, ","))
		}
		sort.Strings(parts)
		probs = append(probs, "members run different versions (fine during a rolling upgrade): "+strings.Join(parts, "; "))
	}
	return probs
}
