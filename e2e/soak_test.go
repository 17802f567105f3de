package e2e

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/internal/wasmtest"
)

// The chaos soak (docs/reliability.md): the real binary under a mixed
// workload while it is SIGKILLed at random moments and at named failpoints,
// and restarted, with plugin faults injected. SOAK_DURATION sets how long
// the chaos phase runs (default 40s, what `make test` runs; .ci/run sets
// 3m; `make soak` runs 5m by default).

// soakPoints are armed in turn, one per crashing round: every crash
// window of the broadcast engine, the catalog committer, the WAL and remaps.
var soakPoints = append(append([]string{}, crashPoints...),
	"catalog.before-commit",
	"catalog.after-commit",
	"wal.before-commit",
	"wal.after-commit",
	"mapping.remap-planned",
)

var (
	soakVChannels = []string{"orders/0", "orders/1", "orders/2"}
	soakBrokers   = []string{"a", "b", "c"}
)

const (
	soakTopic    = "soakq"
	soakQueues   = 3
	soakLockDom  = "soak-res"
	soakLockKeys = 2
)

func soakDuration(t *testing.T) time.Duration {
	s := os.Getenv("SOAK_DURATION")
	if s == "" {
		return 40 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("SOAK_DURATION=%q: want a positive duration like 5m", s)
	}
	return d
}

// soakStats are the counters printed at the end.
type soakStats struct {
	submits, acks, locks, fencedWrites, appends, remaps, reloads atomic.Int64
	staleProbes                                                  [3]atomic.Int64 // refused, by how the grant ended
	fenceViolations                                              atomic.Int64

	mu        sync.Mutex
	adminErrs map[string]int // failed remaps/reloads by error text (crashes make some)
}

func (st *soakStats) adminErr(what string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.adminErrs == nil {
		st.adminErrs = map[string]int{}
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	st.adminErrs[what+": "+msg]++
}

func soakHash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// soakRequest is the broadcast for key: every third AckSyncUp (the
// consumer acks it), some with a plugin fault on the first attempt.
func soakRequest(key string) *client.BroadcastRequest {
	h := soakHash(key)
	fault := ""
	switch h % 10 {
	case 1:
		fault = "trap"
	case 2:
		fault = "fail"
	case 3:
		if h%30 == 3 { // rarer: each costs a call timeout
			fault = "loop"
		}
	}
	sync := h%3 == 0
	return &client.BroadcastRequest{Type: "SoakEffect", PayloadText: key, VChannels: soakVChannels,
		IdempotencyKey: key, AckSyncUp: &sync,
		Properties:   map[string]string{"soak.key": key, "soak.fault": fault},
		ResourceKeys: []client.ResourceKey{{Domain: "soak", Key: fmt.Sprint("k", h%4), Mode: "exclusive"}},
		Timeout:      "5s"}
}

// runBroadcasters submits with four clients until stop closes (see
// runSubmitters).
func runBroadcasters(t *testing.T, c *client.Client, l *ledger, st *soakStats, stop <-chan struct{}, newOK bool) {
	runSubmitters(t, c, l, submitters{workers: 4, timeout: 7 * time.Second, backoff: 20 * time.Millisecond,
		request: soakRequest, counted: func() { st.submits.Add(1) }}, stop, newOK)
}

// soakConsumer reads the vchannels and acks every broadcast message it
// sees (a no-op for FastAck ones); offsets and unacked messages carry over
// restarts.
type soakConsumer struct {
	from    map[string]uint64
	pending []pendingAck
}

type pendingAck struct {
	id uint64
	vc string
}

func (sc *soakConsumer) run(c *client.Client, st *soakStats, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		progress := false
		for _, vc := range soakVChannels {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			res, err := c.ReadChannel(ctx, vc, sc.from[vc], 200, 0)
			cancel()
			if err != nil {
				continue
			}
			for _, m := range res.Messages {
				if id, err := strconv.ParseUint(m.Properties["hostd.broadcast.id"], 10, 64); err == nil {
					sc.pending = append(sc.pending, pendingAck{id, vc})
				}
			}
			if res.Next > sc.from[vc] {
				sc.from[vc] = res.Next
				progress = true
			}
		}
		left := sc.pending[:0]
		for _, p := range sc.pending {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := c.AckBroadcast(ctx, p.id, p.vc)
			cancel()
			switch {
			case err == nil:
				st.acks.Add(1)
			case client.HasCode(err, "not_found"): // finished and its tombstone dropped
			default:
				left = append(left, p)
			}
		}
		sc.pending = left
		if !progress {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// The lease workers write into the soak plugin's KV with fenced writes
// (PUT /v1/plugins/soak/kv/fenced/<key> carrying the grant's fence). Each
// write is a read-modify-write of the key's log: the holder reads it,
// appends "<fence>.<n>," and writes it back. hostd commits a fenced write
// only while its fence is current, so the holders of an exclusive key take
// turns and the log must read in order, with every acknowledged entry
// still there (a stale holder's write would overwrite a newer holder's
// entries or put its own out of order). After its grant ends (released,
// force-released, or expired and the key granted again) a worker probes
// with its old fence, appending "<fence>.stale": hostd must refuse it, so
// no stale entry may ever be in the log.

// fenceModel is what the workers know: the fences handed out and the log
// entries hostd acknowledged.
type fenceModel struct {
	mu      sync.Mutex
	granted map[uint64]bool
	acked   map[string][]string // lock key -> acknowledged log entries
	notes   []string
}

func (f *fenceModel) violation(st *soakStats, format string, args ...any) {
	st.fenceViolations.Add(1)
	f.mu.Lock()
	if len(f.notes) < 10 {
		f.notes = append(f.notes, fmt.Sprintf(format, args...))
	}
	f.mu.Unlock()
}

// How a worker ends a grant before probing with its fence.
const (
	endRelease = iota
	endForce
	endExpire
)

// fencedAppend appends entry to key's log with a fenced write.
func fencedAppend(c *client.Client, key, entry string, fence uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var log []byte
	kv, err := c.GetPluginKV(ctx, "soak", "fenced/"+key)
	switch {
	case err == nil:
		log = kv.Value
	case !client.IsNotFound(err):
		return err
	}
	_, err = c.PutPluginKV(ctx, "soak", "fenced/"+key, append(log, entry+","...),
		&client.KVFence{Domain: soakLockDom, Key: key, Fence: fence})
	return err
}

func runLockWorkers(c *client.Client, f *fenceModel, st *soakStats, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(w) + time.Now().UnixNano()))
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprint("r", rnd.Intn(soakLockKeys))
				end, ttl := endRelease, "3s"
				switch rnd.Intn(10) {
				case 0, 1:
					end = endForce
				case 2:
					end, ttl = endExpire, "1s"
				}
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				g, err := c.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: soakLockDom, Key: key}},
					TTL: ttl, Wait: "1s", Owner: fmt.Sprint("worker-", w)})
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				st.locks.Add(1)
				f.mu.Lock()
				dup := f.granted[g.Fence]
				f.granted[g.Fence] = true
				f.mu.Unlock()
				if dup {
					f.violation(st, "fence %d handed out twice", g.Fence)
				}
				for i := 1; i <= 1+rnd.Intn(3); i++ {
					entry := fmt.Sprintf("%d.%d", g.Fence, i)
					if err := fencedAppend(c, key, entry, g.Fence); err != nil {
						break // not current any more (expired across a restart), or hostd down: outcome unknown
					}
					f.mu.Lock()
					f.acked[key] = append(f.acked[key], entry)
					f.mu.Unlock()
					st.fencedWrites.Add(1)
					time.Sleep(time.Duration(rnd.Intn(30)) * time.Millisecond)
				}
				ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
				var next *client.LockGrant // endExpire: the key's next grant
				switch end {
				case endRelease:
					err = c.ReleaseLock(ctx, g.ID, g.Token)
				case endForce:
					_, err = c.ForceReleaseLock(ctx, soakLockDom, key, g.ID, "soak: evict a holder")
				case endExpire:
					// expires_at is when the holder must stop; hostd's own
					// deadline (counted from the grant's commit, and restarted
					// by a restart) may be a little later. The fence is stale
					// for sure once the key has been granted again: take it.
					time.Sleep(time.Until(g.ExpiresAt) + 50*time.Millisecond)
					next, err = c.AcquireLock(ctx, client.AcquireLock{Keys: []client.LockKey{{Domain: soakLockDom, Key: key}},
						TTL: "3s", Wait: "1500ms", Owner: fmt.Sprint("worker-", w)})
				}
				cancel()
				if err != nil {
					continue // outcome unknown; the TTL ends it
				}
				// Ended: its fence must write nothing from now on.
				err = fencedAppend(c, key, fmt.Sprintf("%d.stale", g.Fence), g.Fence)
				if client.HasCode(err, "not_holder") {
					st.staleProbes[end].Add(1)
				}
				if next != nil {
					st.locks.Add(1)
					ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
					_ = c.ReleaseLock(ctx, next.ID, next.Token)
					cancel()
				}
			}
		}(w)
	}
	wg.Wait()
}

// checkFencedLogs reads the lease workers' logs from the plugin's KV and
// reports every fence violation hostd accepted: a stale probe's entry, an
// entry out of fence order, or an acknowledged entry no longer there.
func checkFencedLogs(t *testing.T, c *client.Client, f *fenceModel, st *soakStats) (entries int) {
	logs := map[string]string{}
	scanKV(t, c, "soak", "fenced/", func(kv client.PluginKV) { logs[strings.TrimPrefix(kv.Key, "fenced/")] = string(kv.Value) })
	for key, log := range logs {
		present := map[string]bool{}
		var prevFence, prevN uint64
		for _, e := range strings.Split(strings.TrimSuffix(log, ","), ",") {
			if e == "" {
				continue
			}
			entries++
			present[e] = true
			fs, ns, _ := strings.Cut(e, ".")
			fence, err1 := strconv.ParseUint(fs, 10, 64)
			n, err2 := strconv.ParseUint(ns, 10, 64)
			switch {
			case ns == "stale":
				f.violation(st, "key %s: the write of ended grant %d was accepted", key, fence)
			case err1 != nil || err2 != nil:
				f.violation(st, "key %s: an entry %q nobody wrote", key, e)
			case fence < prevFence || fence == prevFence && n <= prevN:
				f.violation(st, "key %s: %s written after %d.%d", key, e, prevFence, prevN)
			default:
				prevFence, prevN = fence, n
			}
		}
		for _, e := range f.acked[key] {
			if !present[e] {
				f.violation(st, "key %s: acknowledged entry %s overwritten", key, e)
			}
		}
	}
	for key, acked := range f.acked {
		if _, ok := logs[key]; !ok && len(acked) > 0 {
			f.violation(st, "key %s: %d acknowledged entries, no log", key, len(acked))
		}
	}
	return entries
}

// producer appends to one logic queue with (producer_id, seq); a request
// without an answer is retried with the same seq.
type producer struct {
	queue int
	next  uint64 // seq of the next (or pending) record
	acked uint64 // highest acknowledged seq
}

func (p *producer) run(c *client.Client, st *soakStats, stop <-chan struct{}, until uint64) {
	vc := fmt.Sprintf("%s/%d", soakTopic, p.queue)
	for until == 0 || p.acked < until {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		res, err := c.AppendChannel(ctx, vc, &client.AppendRequest{ProducerID: fmt.Sprint("soak-p", p.queue), Seq: p.next,
			Records: []client.ChannelRecord{{PayloadText: strconv.FormatUint(p.next, 10)}}})
		cancel()
		if err != nil || len(res.Positions) != 1 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		st.appends.Add(1)
		p.acked = p.next
		p.next++
		time.Sleep(5 * time.Millisecond)
	}
}

// runRemaps remaps the topic onto random broker sets until stop closes.
func runRemaps(c *client.Client, st *soakStats, stop <-chan struct{}) {
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(100+rnd.Intn(200)) * time.Millisecond):
		}
		perm := rnd.Perm(len(soakBrokers))
		var brokers []string
		for _, j := range perm[:1+rnd.Intn(len(soakBrokers))] {
			brokers = append(brokers, soakBrokers[j])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		if _, err := c.RemapTopic(ctx, soakTopic, &client.TopicRequest{Brokers: brokers}); err != nil {
			st.adminErr("remap", err)
		} else {
			st.remaps.Add(1)
		}
		cancel()
	}
}

// reloadPlugin writes the n-th variant of the plugin and reloads through
// the API (each variant is a new file, so hostd compiles and swaps it).
func reloadPlugin(c *client.Client, st *soakStats, pluginPath string, wasm []byte, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := writePluginVariant(pluginPath, wasm, n); err != nil {
		st.adminErr("write plugin", err)
	} else if res, err := c.ReloadPlugins(ctx); err != nil {
		st.adminErr("reload", err)
	} else if len(res.Errors) > 0 {
		st.adminErr("reload", errors.New(res.Errors[0].Message))
	} else {
		st.reloads.Add(1)
	}
}

// writePluginVariant writes the plugin with a custom section naming the
// variant appended (a valid module, same code, another sha256), so a
// reload really compiles and swaps it. Written to a temp file and renamed,
// as an operator's deploy would.
func writePluginVariant(path string, wasm []byte, n int) error {
	name := "hostd-soak"
	payload := []byte(strconv.Itoa(n))
	body := append(uleb(uint64(len(name))), name...)
	body = append(body, payload...)
	out := append(append([]byte{}, wasm...), 0)
	out = append(out, uleb(uint64(len(body)))...)
	out = append(out, body...)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// TestSoak is the chaos soak. It fails if an acknowledged broadcast did
// not complete exactly once, an effect is duplicated or lost, a stale
// fence was accepted, a logic queue has a gap or a duplicate, a named
// crash window was never reached, or the daemon panicked.
func TestSoak(t *testing.T) {
	dur := soakDuration(t)
	dir := t.TempDir()
	addr := freePort(t)
	cfg := writeConfig(t, dir, addr, soakVChannels)
	built, err := os.ReadFile(wasmtest.Build(t, "testdata/soak"))
	if err != nil {
		t.Fatal(err)
	}
	pluginPath := filepath.Join(dir, "soak.wasm")
	reloadN := 0
	if err := writePluginVariant(pluginPath, built, reloadN); err != nil {
		t.Fatal(err)
	}
	// The config's broadcast section is the last one writeConfig wrote.
	appendConfig(t, cfg, fmt.Sprintf("  tombstones:\n    max_count: 1000000\nmapping:\n  brokers: [{name: a}, {name: b}, {name: c}]\n"+
		"plugins:\n  call_timeout: 300ms\n  list:\n    - name: soak\n      path: %s\n", pluginPath))
	logPath := filepath.Join(dir, "hostd.log")
	fpLog := filepath.Join(dir, "failpoints.log")
	c, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}

	st := &soakStats{}
	l := newLedger("soak-%06d")
	cons := &soakConsumer{from: map[string]uint64{}}
	fm := &fenceModel{granted: map[uint64]bool{}, acked: map[string][]string{}}
	prods := make([]*producer, soakQueues)
	for q := range prods {
		prods[q] = &producer{queue: q, next: 1}
	}
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	crashed := map[string]int{}
	restarts, randomKills := 0, 0
	topicMade := false

	// runAll runs the whole workload until stop closes.
	runAll := func(stop chan struct{}, newOK bool) *sync.WaitGroup {
		var wg sync.WaitGroup
		spawn := func(fn func()) {
			wg.Add(1)
			go func() { defer wg.Done(); fn() }()
		}
		spawn(func() { runBroadcasters(t, c, l, st, stop, newOK) })
		spawn(func() { cons.run(c, st, stop) })
		spawn(func() { runLockWorkers(c, fm, st, stop) })
		if topicMade {
			for _, p := range prods {
				spawn(func() { p.run(c, st, stop, 0) })
			}
			spawn(func() { runRemaps(c, st, stop) })
		}
		return &wg
	}

	first := rnd.Intn(len(soakPoints)) // short runs cover different windows
	began := time.Now()
	for round := 0; time.Since(began) < dur; round++ {
		env := []string{"HOSTD_FAILPOINTS_LOG=" + fpLog}
		point := ""
		if round%3 != 2 {
			point = soakPoints[(first+round-round/3)%len(soakPoints)]
			n := 2 + rnd.Intn(15)
			if strings.HasPrefix(point, "catalog.") || strings.HasPrefix(point, "wal.") {
				n = 10 + rnd.Intn(150) // hit by every commit
			}
			env = append(env, fmt.Sprintf("HOSTD_FAILPOINTS=%s=crash@%d", point, n))
		}
		d := start(t, cfg, addr, logPath, env...)
		stop := make(chan struct{})
		var wg *sync.WaitGroup
		if d.waitReady(t, c) {
			if !topicMade {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := c.CreateTopic(ctx, &client.TopicRequest{Topic: soakTopic, Queues: soakQueues, Brokers: []string{"a", "b"}})
				cancel()
				topicMade = err == nil || client.HasCode(err, "already_exists")
			}
			wg = runAll(stop, true)
		}
		if point != "" {
			select {
			case <-d.done:
				crashed[point]++
			case <-time.After(6 * time.Second):
				d.kill() // not reached this round
				randomKills++
			}
		} else {
			// A round without a failpoint reloads the plugin under load
			// (every other time killed while the reload may be running).
			reloadN++
			reloaded := make(chan struct{})
			go func(n int) { reloadPlugin(c, st, pluginPath, built, n); close(reloaded) }(reloadN)
			if round%6 == 5 {
				<-reloaded
			}
			time.Sleep(time.Duration(200+rnd.Intn(2000)) * time.Millisecond)
			d.kill()
			<-reloaded
			randomKills++
		}
		restarts++
		close(stop)
		if wg != nil {
			wg.Wait()
		}
	}
	if !topicMade {
		t.Fatalf("the topic was never created; log:\n%s", tail(logPath))
	}

	// Final start, no failpoints: finish every unacknowledged request and
	// pending append, then check.
	d := startReady(t, c, cfg, addr, logPath, "HOSTD_FAILPOINTS_LOG="+fpLog)
	defer d.stop(t)
	stopCons := make(chan struct{})
	consDone := make(chan struct{})
	go func() { cons.run(c, st, stopCons); close(consDone) }()
	runBroadcasters(t, c, l, st, make(chan struct{}), false)
	for _, p := range prods {
		p.run(c, st, make(chan struct{}), p.next) // the pending seq, if any, lands once
	}
	close(stopCons)
	<-consDone

	ctx := context.Background()
	r := soakReport{restarts: restarts, randomKills: randomKills, crashed: crashed, st: st, dur: time.Since(began)}
	// Broadcasts: every issued key acknowledged with one ID, every retry a
	// duplicate of it, one TOMBSTONE task per key.
	r.issued, r.acked = len(l.issued), len(l.acked)
	ids := map[uint64]string{}
	for key, id := range l.acked {
		if other, dup := ids[id]; dup {
			r.bcErrors = append(r.bcErrors, fmt.Sprintf("keys %s and %s share broadcast %d", key, other, id))
		}
		ids[id] = key
		res, err := c.SubmitBroadcast(ctx, soakRequest(key))
		if err != nil || !res.Duplicate || res.ID != id || res.State != "TOMBSTONE" {
			r.bcErrors = append(r.bcErrors, fmt.Sprintf("retry of %s: %+v %v (want duplicate of %d)", key, res, err, id))
		}
	}
	tasks := listBroadcasts(t, c, client.BroadcastFilter{Type: "SoakEffect"})
	for _, tk := range tasks {
		if tk.State == "TOMBSTONE" {
			r.completed++
		}
		if tk.Attempts > 1 {
			r.retriedCallbacks++
		}
		if ids[tk.ID] == "" {
			r.bcErrors = append(r.bcErrors, fmt.Sprintf("task %d (%s) belongs to no acknowledged key", tk.ID, tk.State))
		}
	}
	// Effects: one per acknowledged key, applied once.
	effects := map[string]int{}
	scanKV(t, c, "soak", "effect/", func(kv client.PluginKV) {
		n, _ := strconv.Atoi(string(kv.Value))
		effects[strings.TrimPrefix(kv.Key, "effect/")] = n
	})
	for key := range l.acked {
		switch n := effects[key]; {
		case n == 0:
			r.lost++
		case n > 1:
			r.duplicated++
		}
	}
	for key := range effects {
		if !l.issued[key] {
			r.duplicated++ // an effect nobody asked for
		}
	}
	// Vchannels: no broadcast twice on any of them.
	for _, vc := range append([]string{"_control/0"}, soakVChannels...) {
		seen := map[string]bool{}
		readAll(t, c, vc, func(m api.MessageJSON) {
			id := m.Properties["hostd.broadcast.id"]
			if id != "" && seen[id] {
				r.vcDups++
			}
			seen[id] = true
		})
	}
	// Logic queues: offsets continuous, each producer's seqs exactly
	// 1..last, every acknowledged append present once.
	for _, p := range prods {
		vc := fmt.Sprintf("%s/%d", soakTopic, p.queue)
		var prevOff uint64
		first := true
		want := uint64(1)
		at := map[uint64]api.MessageJSON{}
		readAll(t, c, vc, func(m api.MessageJSON) {
			if !first && m.Offset != prevOff+1 {
				r.queueGaps++
			}
			first, prevOff = false, m.Offset
			seq, err := strconv.ParseUint(string(m.Payload), 10, 64)
			if m.Properties["hostd.broadcast.id"] != "" {
				return // a broadcast's message (topic create/remap), not a producer record
			}
			if err != nil || seq == 0 {
				r.queueDups++ // a record this test never wrote
				r.queueNotes = append(r.queueNotes, fmt.Sprintf("%s: unexpected record %q at %d", vc, m.Payload, m.Offset))
				return
			}
			if _, ok := at[seq]; !ok {
				at[seq] = m
			}
			switch {
			case seq == want:
				want++
			case seq < want:
				r.queueDups++
				if o := at[seq]; len(r.queueNotes) < 10 {
					r.queueNotes = append(r.queueNotes, fmt.Sprintf("%s: seq %d at logic offset %d (%s@%d) and %d (%s@%d)",
						vc, seq, o.Offset, o.Queue, o.QueueOffset, m.Offset, m.Queue, m.QueueOffset))
				}
			default:
				r.queueGaps++
				want = seq + 1
			}
		})
		if want-1 < p.acked {
			r.queueGaps += int(p.acked - (want - 1)) // acknowledged, not there
		}
		r.appended += int(want - 1)
	}
	r.fencedEntries = checkFencedLogs(t, c, fm, st)
	r.fenceViolations = int(st.fenceViolations.Load())
	r.fenceNotes = fm.notes
	hits, _ := os.ReadFile(fpLog)
	for _, p := range soakPoints {
		if !strings.Contains(string(hits), p+"\n") {
			r.neverHit = append(r.neverHit, p)
		}
	}
	// A daemon panic (a crash's "panic:" line or a recovered handler
	// panic); the plugin's injected traps are logged as its stderr.
	if b, _ := os.ReadFile(logPath); true {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "panic:") || strings.Contains(line, "api handler panicked") {
				r.panics = true
			}
			if strings.Contains(line, `msg="plugin call failed"`) {
				switch {
				case strings.Contains(line, "injected trap"):
					r.traps++
				case strings.Contains(line, "call timeout"):
					r.timeouts++
				}
			}
		}
	}
	out := r.String()
	t.Log("\n" + out)
	if path := os.Getenv("SOAK_REPORT"); path != "" {
		_ = os.WriteFile(path, []byte(out), 0o644)
	}
	if r.failed() {
		t.Errorf("soak found a violation (see the report above); daemon log tail:\n%s", tail(logPath))
	}
}

type soakReport struct {
	dur                               time.Duration
	restarts, randomKills             int
	crashed                           map[string]int
	st                                *soakStats
	issued, acked, completed          int
	bcErrors                          []string
	duplicated, lost, vcDups          int
	fenceViolations, fencedEntries    int
	fenceNotes                        []string
	queueGaps, queueDups, appended    int
	queueNotes                        []string
	neverHit                          []string
	traps, timeouts, retriedCallbacks int
	panics                            bool
}

func (r *soakReport) failed() bool {
	return r.acked != r.issued || r.completed != r.acked || len(r.bcErrors) > 0 || r.duplicated > 0 || r.lost > 0 ||
		r.vcDups > 0 || r.fenceViolations > 0 || r.queueGaps > 0 || r.queueDups > 0 || len(r.neverHit) > 0 || r.panics
}

func (r *soakReport) String() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	var pts []string
	for p, n := range r.crashed {
		pts = append(pts, fmt.Sprintf("%s×%d", p, n))
	}
	sort.Strings(pts)
	stale := [3]int64{r.st.staleProbes[endRelease].Load(), r.st.staleProbes[endForce].Load(), r.st.staleProbes[endExpire].Load()}
	ops := r.st.submits.Load() + r.st.acks.Load() + r.st.locks.Load() + r.st.fencedWrites.Load() +
		stale[0] + stale[1] + stale[2] + r.st.appends.Load() + r.st.remaps.Load() + r.st.reloads.Load()
	w("chaos soak: %s, %d restarts survived (%d random SIGKILLs, %d failpoint crashes)", r.dur.Round(time.Second), r.restarts, r.randomKills, r.restarts-r.randomKills)
	w("  crashes at: %s", strings.Join(pts, ", "))
	w("  total operations:                 %d", ops)
	w("  broadcasts issued / acknowledged / completed once: %d / %d / %d (submits incl. retries %d, consumer acks %d)",
		r.issued, r.acked, r.completed, r.st.submits.Load(), r.st.acks.Load())
	w("  plugin faults: %d traps, %d call timeouts logged; %d broadcasts needed more than one callback attempt", r.traps, r.timeouts, r.retriedCallbacks)
	w("  duplicate effects (must be 0):    %d", r.duplicated)
	w("  lost effects (must be 0):         %d", r.lost)
	w("  broadcast twice on a vchannel (must be 0): %d", r.vcDups)
	w("  lease grants %d, fenced plugin-KV writes acknowledged %d (log entries in the KV %d)", r.st.locks.Load(), r.st.fencedWrites.Load(), r.fencedEntries)
	w("  stale-fence writes refused: %d after release, %d after force-release, %d after expiry", stale[0], stale[1], stale[2])
	w("  fence violations accepted (must be 0): %d", r.fenceViolations)
	w("  logic-queue appends acknowledged %d, records %d, remaps %d, plugin reloads %d", r.st.appends.Load(), r.appended, r.st.remaps.Load(), r.st.reloads.Load())
	w("  logic-queue gaps (must be 0):     %d", r.queueGaps)
	w("  logic-queue duplicates (must be 0): %d", r.queueDups)
	if len(r.neverHit) > 0 {
		w("  FAILPOINTS NEVER HIT: %s", strings.Join(r.neverHit, ", "))
	}
	for _, e := range r.bcErrors {
		w("  BROADCAST: %s", e)
	}
	for _, n := range r.queueNotes {
		w("  QUEUE: %s", n)
	}
	for _, n := range r.fenceNotes {
		w("  FENCE: %s", n)
	}
	var errs []string
	r.st.mu.Lock()
	for e, n := range r.st.adminErrs {
		errs = append(errs, fmt.Sprintf("%s ×%d", e, n))
	}
	r.st.mu.Unlock()
	sort.Strings(errs)
	for _, e := range errs {
		w("  admin error (expected around crashes): %s", e)
	}
	if r.panics {
		w("  PANIC in the daemon log")
	}
	return b.String()
}
