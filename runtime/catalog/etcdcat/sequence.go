package etcdcat

import (
	"context"
	"fmt"
	"math"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// seqState is one sequence of one Store: values in [next, limit) are
// reserved by this store and not yet handed out.
type seqState struct {
	mu     sync.Mutex
	loaded bool
	next   uint64
	limit  uint64
}

// maxSeqRaces bounds how often a reservation retries after another store
// moved the sequence between its read and its txn.
const maxSeqRaces = 64

// NextSequence durably allocates n consecutive values of the named
// sequence and returns the first; see catalog.Store. A block of
// max(n, SequenceBlock) values is reserved with a txn that compares the
// sequence record's ModRevision (and, on a fenced store, the term) before
// any of it is handed out. Each Store (each WithFence store too) keeps its
// own blocks; when another store reserved meanwhile, the rest of this
// store's block is dropped and the new block starts at the durable limit,
// so a value is never handed out twice and the limit never goes down.
// Errors: catalog.ErrInvalid, catalog.ErrClosed, catalog.ErrFenced, etcd.
func (s *Store) NextSequence(ctx context.Context, name string, n uint64) (uint64, error) {
	if name == "" || len(name) > 256 {
		return 0, fmt.Errorf("%w: sequence name must be 1..256 bytes, got %d", catalog.ErrInvalid, len(name))
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: sequence %q: n must be >= 1", catalog.ErrInvalid, name)
	}
	if s.c.isStopped() {
		return 0, catalog.ErrClosed
	}
	if s.fence != nil && s.fenced.Load() {
		return 0, s.fencedErr()
	}
	s.seqMu.Lock()
	st := s.seqs[name]
	if st == nil {
		st = &seqState{}
		s.seqs[name] = st
	}
	s.seqMu.Unlock()

	st.mu.Lock()
	defer st.mu.Unlock()
	if st.loaded && n <= math.MaxUint64-st.next && st.next+n <= st.limit {
		first := st.next
		st.next += n
		return first, nil
	}
	ckey := catalog.SequenceKey(name)
	key := s.ekey(ckey)
	for range maxSeqRaces {
		rctx, cancel := s.rctx(ctx)
		resp, err := s.cli.Get(rctx, key)
		cancel()
		if err != nil {
			return 0, etcdErr(fmt.Sprintf("load sequence %q", name), err)
		}
		durable, modRev := uint64(1), int64(0)
		if len(resp.Kvs) > 0 {
			durable, err = catalog.DecodeSequence(ckey, resp.Kvs[0].Value)
			if err != nil {
				return 0, err
			}
			modRev = resp.Kvs[0].ModRevision
		}
		next := st.next
		if !st.loaded || durable != st.limit {
			next = durable // first use, or another store reserved: start after it
		}
		if n > math.MaxUint64-next {
			return 0, fmt.Errorf("%w: sequence %q exhausted (next %d, n %d)", catalog.ErrInvalid, name, next, n)
		}
		grow := max(n, s.opts.SequenceBlock)
		if grow > math.MaxUint64-next {
			grow = n
		}
		limit := next + grow
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRev)}
		var els []clientv3.Op
		if s.fence != nil {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.fence.Key), "=", s.fence.Revision))
			els = append(els, clientv3.OpGet(s.fence.Key, clientv3.WithKeysOnly()))
		}
		rctx, cancel = s.rctx(ctx)
		tresp, err := s.cli.Txn(rctx).If(cmps...).Then(clientv3.OpPut(key, string(catalog.EncodeSequence(limit)))).Else(els...).Commit()
		cancel()
		if err != nil {
			return 0, etcdErr(fmt.Sprintf("reserve sequence %q", name), err)
		}
		if !tresp.Succeeded {
			if s.fence != nil && isFenced(tresp, s.fence) {
				s.markFenced()
				return 0, s.fencedErr()
			}
			continue // another store reserved between our read and txn
		}
		st.loaded, st.next, st.limit = true, next+n, limit
		return next, nil
	}
	return 0, fmt.Errorf("%w: sequence %q: reservation lost %d races with other stores", catalog.ErrConflict, name, maxSeqRaces)
}
