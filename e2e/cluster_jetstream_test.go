package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hostd-dev/hostd/client"
	"github.com/hostd-dev/hostd/internal/natstest"
)

// The JetStream half of the cluster harness: 3 nats-server processes with
// JetStream (natsProcs, sync_interval always: the recommended setup) hold
// the physical queues
// (wal.backend: jetstream, 3 replicas per stream); etcd holds the catalog.

// startClusterJS starts etcd, a 3-server JetStream cluster and n replicas
// whose physical queues live on JetStream.
func startClusterJS(t *testing.T, n int, extraConfig string) *ecluster {
	t.Helper()
	nc := startNATSProcs(t)
	ec := startCluster(t, n, fmt.Sprintf(`wal:
  backend: jetstream
  jetstream:
    url: %s
    replicas: 3
    request_timeout: 3s
%s`, nc.URL(), extraConfig))
	ec.nats = nc
	return ec
}

// producerLog records what a producer-idempotent appender was told.
type producerLog struct {
	vchannel, producer string
	mu                 sync.Mutex
	acked              map[uint64]uint64 // seq → logic offset acknowledged
	issued             uint64            // highest seq sent
	retried            int               // attempts after the first of a seq
	wait               chan struct{}     // closed when the appender stopped
}

// runProducer appends one data record per seq to vchannel through c,
// with a producer id, retrying a seq until it is acknowledged (a retry of
// a seq already appended answers with its original position) — until stop
// closes; the seq in flight then is still finished (up to 90 s).
func runProducer(t *testing.T, c *client.Client, vchannel, producer string, stop <-chan struct{}) *producerLog {
	p := &producerLog{vchannel: vchannel, producer: producer, acked: map[uint64]uint64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			p.mu.Lock()
			p.issued = seq
			p.mu.Unlock()
			giveUp := time.Now().Add(90 * time.Second)
			for attempt := 0; ; attempt++ {
				ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
				res, err := c.AppendChannel(ctx, vchannel, &client.AppendRequest{ProducerID: producer, Seq: seq,
					Records: []client.ChannelRecord{{PayloadText: fmt.Sprintf("%s/%d", producer, seq)}}})
				cancel()
				if err == nil && len(res.Positions) == 1 {
					p.mu.Lock()
					p.acked[seq] = res.Positions[0].Offset
					p.retried += attempt
					p.mu.Unlock()
					break
				}
				if err != nil && !retryable(err) {
					t.Errorf("producer %s seq %d: %v", producer, seq, err)
					return
				}
				if time.Now().After(giveUp) {
					t.Errorf("producer %s seq %d: unanswered for 90s: %v", producer, seq, err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { <-done })
	p.wait = done
	return p
}

// check reads the whole vchannel through c and compares it with what the
// producer was told: every seq sent is there exactly once, at the offset
// acknowledged for it.
func (p *producerLog) check(t *testing.T, c *client.Client) {
	t.Helper()
	<-p.wait
	seen := map[uint64][]uint64{}
	ctx := context.Background()
	for from := uint64(0); ; {
		r, err := c.ReadChannel(ctx, p.vchannel, from, 500, 0)
		if err != nil {
			t.Fatalf("read %s from %d: %v", p.vchannel, from, err)
		}
		for _, m := range r.Messages {
			s, ok := strings.CutPrefix(string(m.Payload), p.producer+"/")
			if m.Kind != "data" || !ok {
				continue
			}
			seq, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("%s offset %d: payload %q", p.vchannel, m.Offset, m.Payload)
			}
			seen[seq] = append(seen[seq], m.Offset)
		}
		if len(r.Messages) == 0 || r.Next >= r.Max {
			break
		}
		from = r.Next
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for seq := uint64(1); seq <= p.issued; seq++ {
		offs := seen[seq]
		want, acked := p.acked[seq]
		switch {
		case len(offs) > 1:
			t.Errorf("producer %s seq %d appended %d times (offsets %v)", p.producer, seq, len(offs), offs)
		case acked && len(offs) == 0:
			t.Errorf("producer %s seq %d acknowledged at %d but not in %s", p.producer, seq, want, p.vchannel)
		case acked && offs[0] != want:
			t.Errorf("producer %s seq %d acknowledged at %d, found at %d", p.producer, seq, want, offs[0])
		case !acked && seq < p.issued:
			t.Errorf("producer %s seq %d never acknowledged", p.producer, seq)
		}
	}
	for seq := range seen {
		if seq > p.issued {
			t.Errorf("producer %s: seq %d in %s was never sent", p.producer, seq, p.vchannel)
		}
	}
	t.Logf("producer %s: %d appends acknowledged (%d retries), each once in %s", p.producer, len(p.acked), p.retried, p.vchannel)
}

// checkStreamTerms reads every hostd stream on JetStream and checks that
// the writer's term (Hostd-Term, on every record and fence) never goes
// down along a stream: a record of an older term after one of a newer
// term would be a deposed leader's append accepted after its successor
// wrote (cluster.md hard part 4).
func checkStreamTerms(t *testing.T, c *natstest.Procs) {
	t.Helper()
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streams, records := 0, 0
	lister := js.ListStreams(ctx)
	for si := range lister.Info() {
		q := si.Config.Metadata["hostd_queue"]
		if q == "" {
			continue
		}
		streams++
		st, err := js.Stream(ctx, si.Config.Name)
		if err != nil {
			t.Fatal(err)
		}
		var last uint64
		for seq := si.State.FirstSeq; seq <= si.State.LastSeq && si.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // purged or deleted
			}
			records++
			term, _ := strconv.ParseUint(m.Header.Get("Hostd-Term"), 10, 64)
			if term < last {
				t.Errorf("queue %s seq %d: a record of term %d after term %d", q, seq, term, last)
			}
			last = max(last, term)
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	if streams == 0 {
		t.Fatal("no hostd streams on JetStream: the queues are not there")
	}
	t.Logf("JetStream: %d streams, %d records, terms never go down", streams, records)
}

// ackMonitor samples how many broadcasts the ledger holds as acknowledged,
// every 50 ms, to measure pauses in service.
type ackMonitor struct {
	mu      sync.Mutex
	samples []ackSample
}

type ackSample struct {
	at    time.Time
	acked int
}

func monitorAcks(l *ledger, stop <-chan struct{}) *ackMonitor {
	m := &ackMonitor{}
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				l.mu.Lock()
				n := len(l.acked)
				l.mu.Unlock()
				m.mu.Lock()
				m.samples = append(m.samples, ackSample{now, n})
				m.mu.Unlock()
			}
		}
	}()
	return m
}

// window returns the acknowledgements made in [from, to) and the longest
// stretch in it without one.
func (m *ackMonitor) window(from, to time.Time) (acks int, longest time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	first, last, lastChange := -1, -1, from
	for _, s := range m.samples {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		if first < 0 {
			first = s.acked
		} else if s.acked > last {
			longest = max(longest, s.at.Sub(lastChange))
			lastChange = s.at
		}
		last = s.acked
	}
	longest = max(longest, to.Sub(lastChange))
	if first < 0 {
		return 0, to.Sub(from)
	}
	return last - first, longest
}

// firstAckAfter is when the acknowledged count first grew after t (zero
// if it did not, up to d).
func (m *ackMonitor) firstAckAfter(t time.Time, d time.Duration) time.Duration {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		base := -1
		for _, s := range m.samples {
			if s.at.Before(t) {
				base = s.acked
				continue
			}
			if base >= 0 && s.acked > base {
				m.mu.Unlock()
				return s.at.Sub(t)
			}
		}
		m.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	return 0
}

// TestClusterJetStreamInfraLoss: 3 replicas, 3 etcd members, 3 NATS
// servers; a client keeps submitting broadcasts (idempotency keys) and
// producer-idempotent appends through random replicas while the test
// takes away (1) one etcd member (stopped) and one NATS server (killed)
// together — the service must continue, and the longest pause is logged
// (a stream whose JetStream leader died waits for NATS's re-election);
// (2) a majority of etcd — writes fail with 503 and nothing is
// acknowledged, then service resumes when quorum returns; (3) a majority
// of NATS (killed) — likewise.
// Afterwards every acknowledged broadcast and append is there exactly
// once and no stream holds an older term after a newer one.
func TestClusterJetStreamInfraLoss(t *testing.T) {
	ec := startClusterJS(t, 3, "")
	rc := ec.randomClient()
	l := newLedger("infra-%05d")
	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Add(1)
	go func() {
		defer load.Done()
		runSubmitters(t, rc, l, submitters{workers: 3, timeout: 6 * time.Second, backoff: 20 * time.Millisecond,
			request: clusterRequest}, stop, true)
	}()
	prod := runProducer(t, ec.randomClient(client.WithRetries(1)), clusterVChannels[1], "infra-producer", stop)
	mon := monitorAcks(l, stop)
	time.Sleep(2 * time.Second)

	// (1) One etcd member and one NATS server: no quorum lost.
	t0 := time.Now()
	ec.etcd.Stop(0)
	ec.nats.Kill(0) // SIGKILL: its streams wait for NATS to elect other leaders
	time.Sleep(15 * time.Second)
	acks, pause := mon.window(t0, time.Now())
	t.Logf("one etcd member stopped and one NATS server killed: %d broadcasts acknowledged in 15 s, longest pause %v", acks, pause.Round(time.Millisecond))
	if acks < 5 {
		t.Errorf("service did not continue with one etcd member and one NATS server down: %d acknowledgements in 15 s", acks)
	}
	ec.etcd.Restart(0)
	ec.nats.Restart(0)
	time.Sleep(5 * time.Second) // the restarted servers catch up

	// (2) and (3): a majority of etcd, then of NATS.
	for _, loss := range []struct {
		name             string
		stop, restart    func()
		settle, downtime time.Duration
	}{
		{"etcd majority", func() { ec.etcd.Stop(1); ec.etcd.Stop(2) }, func() { ec.etcd.Restart(1); ec.etcd.Restart(2) },
			2*clusterElectionTTL + 2*time.Second, 10 * time.Second},
		{"NATS majority", func() { ec.nats.Kill(1); ec.nats.Kill(2) }, func() { ec.nats.Restart(1); ec.nats.Restart(2) },
			3 * time.Second, 10 * time.Second},
	} {
		loss.stop()
		down := time.Now()
		time.Sleep(loss.settle)
		quiet := time.Now()
		// A write now cannot be acknowledged.
		r := ec.replicas[0]
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		probe := "probe-" + strings.ReplaceAll(loss.name, " ", "-")
		res, err := r.c.SubmitBroadcast(ctx, clusterRequest(probe))
		cancel()
		l.mu.Lock() // finished by the drain below, like any client's retry
		l.issued[probe] = true
		l.retry = append(l.retry, probe)
		l.mu.Unlock()
		var ce *client.Error
		switch {
		case err == nil && res.State == "TOMBSTONE" && !res.TimedOut:
			t.Errorf("%s lost: a broadcast was acknowledged complete (%d)", loss.name, res.ID)
		case errors.As(err, &ce):
			t.Logf("%s lost: a write answers %d %s", loss.name, ce.Status, ce.Code)
		case err != nil:
			t.Logf("%s lost: a write fails: %v", loss.name, err)
		default:
			t.Logf("%s lost: a write is accepted but not complete (state %s, timed out %v)", loss.name, res.State, res.TimedOut)
		}
		time.Sleep(loss.downtime - time.Since(down) + loss.settle)
		if acks, _ := mon.window(quiet, time.Now()); acks > 0 {
			t.Errorf("%s lost: %d broadcasts acknowledged while it was gone", loss.name, acks)
		}
		loss.restart()
		back := time.Now()
		d := mon.firstAckAfter(back, 90*time.Second)
		if d == 0 {
			dumpStreams(t, ec.nats)
			t.Fatalf("%s back: no broadcast acknowledged within 90 s", loss.name)
		}
		t.Logf("%s back: first acknowledgement after %v", loss.name, d.Round(time.Millisecond))
		time.Sleep(3 * time.Second)
	}
	close(stop)
	load.Wait()
	drainLedger(t, rc, l, clusterRequest)
	checkClusterBroadcasts(t, ec, rc, l, clusterRequest)
	prod.check(t, rc)
	checkStreamTerms(t, ec.nats)
}

// dumpStreams logs every hostd stream's cluster state (leader, replicas
// current or lagging) as seen by the servers: what a failure to resume
// after quorum returned looked like.
func dumpStreams(t *testing.T, c *natstest.Procs) {
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Logf("dump streams: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lister := js.ListStreams(ctx)
	for si := range lister.Info() {
		var reps []string
		if si.Cluster != nil {
			for _, r := range si.Cluster.Replicas {
				reps = append(reps, fmt.Sprintf("%s(current %v, lag %d, active %v)", r.Name, r.Current, r.Lag, r.Active))
			}
			t.Logf("stream %s (%s): leader %q, replicas %v, msgs %d, last seq %d", si.Config.Name, si.Config.Metadata["hostd_queue"],
				si.Cluster.Leader, reps, si.State.Msgs, si.State.LastSeq)
		}
	}
	if err := lister.Err(); err != nil {
		t.Logf("dump streams: %v", err)
	}
}

// TestClusterSoak is the cluster variant of the chaos soak (`make soak
// SOAK_CLUSTER=1`; skipped otherwise): 3 replicas, 3 etcd members and 3
// nats-server processes under the kill test's load (collections
// broadcasts, leases, a producer) for SOAK_DURATION, with a random fault
// every few seconds — the leader killed, the leader paused past its TTL,
// a NATS server killed, an etcd member stopped (each brought back) — and
// then every check of TestClusterLeaderKills and TestClusterJetStreamInfraLoss.
func TestClusterSoak(t *testing.T) {
	if os.Getenv("SOAK_CLUSTER") != "1" {
		t.Skip("set SOAK_CLUSTER=1 (make soak SOAK_CLUSTER=1) to run the cluster soak")
	}
	d := soakDuration(t)
	ec := startClusterJS(t, 3, collectionsConfig(t))
	load := startClusterLoad(t, ec, 30*time.Second, "soak-producer")
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	faults := map[string]int{}
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Duration(3000+rnd.IntN(4000)) * time.Millisecond)
		leader, _ := ec.leader(90 * time.Second)
		switch f := rnd.IntN(4); f {
		case 0:
			faults["leader killed"]++
			leader.kill9()
			ec.leader(90*time.Second, leader)
			ec.start(leader)
			ec.waitReady(leader)
		case 1:
			faults["leader paused"]++
			leader.signal(t, syscall.SIGSTOP)
			ec.leader(90*time.Second, leader)
			leader.signal(t, syscall.SIGCONT)
		case 2:
			faults["NATS server killed"]++
			i := rnd.IntN(3)
			ec.nats.Kill(i)
			time.Sleep(8 * time.Second)
			ec.nats.Restart(i)
		case 3:
			faults["etcd member stopped"]++
			i := rnd.IntN(3)
			ec.etcd.Stop(i)
			time.Sleep(5 * time.Second)
			ec.etcd.Restart(i)
		}
	}
	t.Logf("cluster soak %v: faults %v", d, faults)
	load.finish(t, ec)
	checkStreamTerms(t, ec.nats)
}
