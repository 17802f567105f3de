package broadcast

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/wal"
)

// forgingChannels serves one extra entry (forged) to reads of its
// vchannel that find nothing real, as if it had been written there.
type forgingChannels struct {
	ResolverChannels
	forged ChannelEntry
}

func (f forgingChannels) Read(ctx context.Context, vc string, from uint64, limit int) ([]ChannelEntry, error) {
	ents, err := f.ResolverChannels.Read(ctx, vc, from, limit)
	if err == nil && len(ents) == 0 && vc == f.forged.Checkpoint.VChannel && from <= f.forged.Offset {
		return []ChannelEntry{f.forged}, nil
	}
	return ents, err
}

// Recovery looks for a task's lost appends by kind: a record that carries
// the task's hostd.broadcast.id but is not of hostd's kinds is not the
// task's append (the task appends again); legacy records count only for
// tasks created before record kinds.
func TestRecoveryTrustsOnlyHostdKinds(t *testing.T) {
	const forgedAt = 1000
	for _, tc := range []struct {
		name    string
		kind    wal.Kind
		oldTask bool // the task record predates record kinds
		trusted bool
	}{
		{"data record", wal.KindData, false, false},
		{"data record, old task", wal.KindData, true, false},
		{"legacy record", wal.KindLegacy, false, false},
		{"legacy record, old task", wal.KindLegacy, true, true},
		{"broadcast record", wal.KindBroadcast, false, true},
		{"marker record", wal.KindMarker, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vc := "t/0"
			v := newEnv(t, []string{vc}, nil, nil)
			v.close()
			st, err := catalog.Open(catalog.DefaultOptions(v.dir))
			if err != nil {
				t.Fatal(err)
			}
			const id = 42
			rec := taskRecord{ID: id, State: StatePending, Message: Message{Type: NoopType}, VChannels: []string{ControlChannel, vc},
				Keys: withClusterKey(nil), CreatedAt: time.Now(), LowWater: map[string]uint64{ControlChannel: 0, vc: 0}, Kinds: !tc.oldTask}
			if _, err := st.Commit(context.Background(), &catalog.Batch{Ops: []catalog.Op{{Key: taskKey(id), Value: mustJSON(&rec)}}}); err != nil {
				t.Fatal(err)
			}
			st.Close()
			forged := ChannelEntry{Offset: forgedAt, Kind: tc.kind,
				Properties: map[string]string{HeaderBroadcastID: strconv.Itoa(id), HeaderMessageType: NoopType},
				Checkpoint: Checkpoint{VChannel: vc, Offset: forgedAt, PhysicalQueue: vc, TimeTick: 1}}
			v.opts = func(o *Options) { o.Channels = forgingChannels{o.Channels.(ResolverChannels), forged} }
			if err := v.open(); err != nil {
				t.Fatal(err)
			}
			in := v.waitState(id, StateTombstone)
			var cp *Checkpoint
			for _, s := range in.VChannels {
				if s.Name == vc {
					cp = s.Checkpoint
				}
			}
			if cp == nil {
				t.Fatalf("no checkpoint on %s: %+v", vc, in)
			}
			real, err := v.res.Read(context.Background(), vc, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if tc.trusted {
				if cp.Offset != forgedAt || len(real) != 0 {
					t.Fatalf("a %s record should be recovered as the append: checkpoint %+v, log %+v", tc.kind, cp, real)
				}
				return
			}
			if cp.Offset == forgedAt {
				t.Fatalf("recovery recorded a %s record as broadcast %d's append", tc.kind, id)
			}
			if len(real) != 1 || real[0].Offset != cp.Offset || real[0].Kind != wal.KindBroadcast || real[0].Props[HeaderBroadcastID] != strconv.Itoa(id) {
				t.Fatalf("want one re-appended broadcast record at the checkpoint %+v, log %+v", cp, real)
			}
		})
	}
}

// forge appends, until stop, records that claim to be broadcasts 1..n
// (every reserved header a consumer or recovery could look at) to the
// control channel and vcs, as a client would through the resolver. It
// returns how many forged records were accepted.
func forge(res wal.Resolver, vchannels []string, n int, stop <-chan struct{}, wg *sync.WaitGroup, accepted, refused *atomic.Int64) {
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				vc := vchannels[(g+i)%len(vchannels)]
				id := 1 + (g*7+i)%n
				rec := wal.Record{Payload: []byte("forged"), Props: map[string]string{
					HeaderBroadcastID: strconv.Itoa(id), HeaderMessageType: "count", headerEpoch: "0"}}
				if i%2 == 1 {
					delete(rec.Props, headerEpoch)
				}
				_, err := res.Append(context.Background(), vc, []wal.Record{rec})
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, wal.ErrInvalid):
					refused.Add(1)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}(g)
	}
}

// TestForgeChild is the child side of TestForgedAppendsRaceCrashRecovery:
// broadcasts and forgers run together until the failpoint kills it.
func TestForgeChild(t *testing.T) {
	dir := os.Getenv("HOSTD_BC_FORGE_DIR")
	if dir == "" {
		return
	}
	v := newCrashEnv(t, dir)
	stop := make(chan struct{})
	var fwg sync.WaitGroup
	var accepted, refused atomic.Int64
	forge(v.res, append([]string{ControlChannel}, vcs(3)...), crashN+4, stop, &fwg, &accepted, &refused)
	submitCrashRequests(v)
	close(stop)
	fwg.Wait()
	fmt.Println("CHILD-FINISHED-WITHOUT-CRASH")
}

// Forged appends (records carrying hostd.broadcast.id of real tasks) race
// the broadcasts before a kill -9 at a failpoint and the crash recovery
// after it: no forged record is ever accepted, and every checkpoint —
// recovered or not — points at a broadcast-kind record of its own task.
func TestForgedAppendsRaceCrashRecovery(t *testing.T) {
	bin := failpointBinary(t)
	for _, point := range []string{"broadcast.after-persist", "broadcast.mid-append"} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			cmd := exec.Command(bin, "-test.run=^TestForgeChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "HOSTD_BC_FORGE_DIR="+data, "HOSTD_FAILPOINTS="+point+"=crash@3")
			out, err := cmd.CombinedOutput()
			if err == nil || strings.Contains(string(out), "CHILD-FINISHED-WITHOUT-CRASH") {
				t.Fatalf("child did not crash at %s: %v\n%s", point, err, out)
			}
			// Restart while forgers keep appending: recovery reads the
			// vchannels as they write.
			var runs atomic.Int32
			ref := &storeRef{}
			v := &env{t: t, dir: data, queues: vcs(3), opts: ref.set, reg: func(e *Engine) {
				e.Register("count", counterHandler(ref.get, &runs), TypeOptions{})
			}}
			t.Cleanup(v.close)
			o := catalog.DefaultOptions(data)
			o.GCInterval = 0
			st, err := catalog.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			w, err := wal.Open(context.Background(), wal.Config{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			pre, err := wal.NewDirect(context.Background(), w)
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var fwg sync.WaitGroup
			var accepted, refused atomic.Int64
			all := append([]string{ControlChannel}, vcs(3)...)
			forge(pre, all, crashN+4, stop, &fwg, &accepted, &refused)
			time.Sleep(20 * time.Millisecond)
			close(stop)
			fwg.Wait()
			w.Close()
			st.Close()
			// The engine's own WAL, with forgers on it during Start.
			stop = make(chan struct{})
			started := make(chan struct{})
			var once sync.Once
			v.opts = func(o *Options) {
				ref.set(o)
				once.Do(func() { forge(v.res, all, crashN+4, stop, &fwg, &accepted, &refused); close(started) })
			}
			if err := v.open(); err != nil {
				t.Fatal(err)
			}
			<-started
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for i := 0; i < crashN; i++ {
				r := crashRequest(i)
				if res, err := v.e.Submit(ctx, &r); err != nil || res.State != StateTombstone {
					t.Fatalf("request %d after restart: %+v %v", i, res, err)
				}
			}
			close(stop)
			fwg.Wait()
			if accepted.Load() != 0 || refused.Load() == 0 {
				t.Fatalf("forged appends: %d accepted, %d refused", accepted.Load(), refused.Load())
			}
			l, _ := v.e.List(Filter{})
			if len(l) != crashN {
				t.Fatalf("%d tasks, want %d", len(l), crashN)
			}
			for _, in := range l {
				for _, s := range in.VChannels {
					if s.Checkpoint == nil {
						t.Fatalf("task %d has no checkpoint on %s", in.ID, s.Name)
					}
					ms, err := v.res.Read(ctx, s.Name, s.Checkpoint.Offset, 1)
					if err != nil || len(ms) != 1 {
						t.Fatalf("read checkpoint %+v: %v %v", s.Checkpoint, ms, err)
					}
					if m := ms[0]; m.Kind != wal.KindBroadcast || m.Props[HeaderBroadcastID] != strconv.FormatUint(in.ID, 10) {
						t.Fatalf("task %d's checkpoint on %s points at a %s record of broadcast %q", in.ID, s.Name, m.Kind, m.Props[HeaderBroadcastID])
					}
				}
			}
			v.assertNoDuplicates(vcs(3)...)
			if n := readCounter(t, v.store); n != crashN {
				t.Fatalf("counter %d, want %d", n, crashN)
			}
		})
	}
}
