package jswal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hostd-dev/hostd/runtime/wal"
)

// metaQueue is the stream metadata key holding the queue's name (stream
// names are derived from a hash of it).
const metaQueue = "hostd_queue"

// Log is the set of physical queues on JetStream, one stream per queue.
// Safe for concurrent use; appends to one queue are serialized in the
// process (each carries the expected last sequence, so only one can win).
type Log struct {
	o   Options
	nc  *nats.Conn
	own bool // nc was dialed by Open: Close closes it
	js  jetstream.JetStream

	term     atomic.Uint64
	pseq     atomic.Uint64
	fencedBy sync.Once // Options.OnFenced, once

	tmu      sync.Mutex
	lastTick uint64

	mu     sync.Mutex
	qs     map[string]*qstate
	closed bool

	tracer    trace.Tracer
	mAppends  metric.Int64Counter
	mFailures metric.Int64Counter
	mFences   metric.Int64Counter
	mRetries  metric.Int64Counter
}

// qstate is the writer's view of one queue. mu serializes appends, fences
// and trims of the queue in this process; it is held across JetStream
// requests (nothing else is).
type qstate struct {
	mu        sync.Mutex
	stream    jetstream.Stream // nil until looked up
	loaded    bool             // the fields below mirror the stream
	tail      uint64           // stream sequence of the last message (0: none)
	tailTick  uint64           // tick of the last message
	fenceSeq  uint64           // sequence of the last fence or seal (0: none)
	fenceTerm uint64           // its term
	sealed    bool             // the last fence-subject message is a seal
}

// The JetStream log is a wal.Log, a wal.Fencer and a wal.Sealer.
var (
	_ wal.Log    = (*Log)(nil)
	_ wal.Fencer = (*Log)(nil)
	_ wal.Sealer = (*Log)(nil)
)

// Open connects (or uses opts.Conn), checks that the server's max_payload
// can carry the largest record plus its envelope (*PayloadError if not)
// and that JetStream is enabled, and returns the log.
func Open(ctx context.Context, opts Options) (*Log, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	l := &Log{o: opts, nc: opts.Conn, qs: map[string]*qstate{}}
	if l.nc == nil {
		var nopts []nats.Option
		switch {
		case opts.CredsFile != "":
			nopts = append(nopts, nats.UserCredentials(opts.CredsFile))
		case opts.User != "":
			nopts = append(nopts, nats.UserInfo(opts.User, opts.Password))
		case opts.Token != "":
			nopts = append(nopts, nats.Token(opts.Token))
		}
		nc, err := nats.Connect(opts.URL, nopts...)
		if err != nil {
			return nil, fmt.Errorf("jswal: connect to %s: %w", opts.URL, err)
		}
		l.nc, l.own = nc, true
	}
	fail := func(err error) (*Log, error) {
		if l.own {
			l.nc.Close()
		}
		return nil, err
	}
	if need := int64(opts.MaxRecordBytes + Envelope); l.nc.MaxPayload() < need {
		return fail(&PayloadError{ServerMax: l.nc.MaxPayload(), Need: need})
	}
	js, err := jetstream.New(l.nc, jetstream.WithDefaultTimeout(opts.RequestTimeout), jetstream.WithPublishAsyncTimeout(opts.RequestTimeout))
	if err != nil {
		return fail(fmt.Errorf("jswal: %w", err))
	}
	l.js = js
	actx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
	defer cancel()
	if _, err := js.AccountInfo(actx); err != nil {
		return fail(fmt.Errorf("jswal: JetStream not available: %w", err))
	}
	l.term.Store(opts.Term)
	l.tracer = opts.TracerProvider.Tracer("github.com/hostd-dev/hostd/runtime/wal/jswal")
	m := opts.MeterProvider.Meter("github.com/hostd-dev/hostd/runtime/wal/jswal")
	l.mAppends, _ = m.Int64Counter("hostd.wal.jetstream.appends", metric.WithDescription("Append calls that stored their records"))
	l.mFailures, _ = m.Int64Counter("hostd.wal.jetstream.append_failures", metric.WithDescription("Append calls that failed"))
	l.mFences, _ = m.Int64Counter("hostd.wal.jetstream.fences", metric.WithDescription("term-fence records written"))
	l.mRetries, _ = m.Int64Counter("hostd.wal.jetstream.retries", metric.WithDescription("publishes retried after a conflict or an unknown outcome"))
	return l, nil
}

// Close makes further calls fail with wal.ErrClosed and closes the
// connection if Open dialed it.
func (l *Log) Close() error {
	l.mu.Lock()
	was := l.closed
	l.closed = true
	l.mu.Unlock()
	if !was && l.own {
		l.nc.Close()
	}
	return nil
}

// Term returns the writer's current term.
func (l *Log) Term() uint64 { return l.term.Load() }

// names returns the stream name and subject of queue: the prefix, a
// readable part of the queue name and a hash of it (stream names may not
// hold '.', '/', spaces and the like; the hash keeps them unique).
func (l *Log) names(queue string) (stream, subject string) {
	sum := sha256.Sum256([]byte(queue))
	h := hex.EncodeToString(sum[:12])
	var b strings.Builder
	for _, r := range queue {
		if b.Len() >= 32 {
			break
		}
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return l.o.StreamPrefix + "_" + b.String() + "_" + h, l.o.StreamPrefix + ".q." + h
}

// fenceSubject is the subject of queue's fences and seal: apart from
// the data subject, so a fence is ordered against other fences only
// (Nats-Expected-Last-Subject-Sequence) and an appending writer cannot
// keep it out, while it still moves the stream's last sequence that every
// data append expects.
func (l *Log) fenceSubject(queue string) string {
	_, data := l.names(queue)
	return l.o.StreamPrefix + ".f." + data[len(l.o.StreamPrefix)+len(".q."):]
}

// anySubject matches both subjects of queue (for Wait).
func (l *Log) anySubject(queue string) string {
	_, data := l.names(queue)
	return l.o.StreamPrefix + ".*." + data[len(l.o.StreamPrefix)+len(".q."):]
}

func (l *Log) q(queue string) (*qstate, error) {
	if err := wal.ValidateQueueName(queue); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, wal.ErrClosed
	}
	s := l.qs[queue]
	if s == nil {
		s = &qstate{}
		l.qs[queue] = s
	}
	return s, nil
}

func (l *Log) forget(queue string) {
	l.mu.Lock()
	delete(l.qs, queue)
	l.mu.Unlock()
}

func (l *Log) rctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.o.RequestTimeout)
}

// stream returns the queue's stream handle (looked up once).
func (l *Log) stream(ctx context.Context, queue string, s *qstate) (jetstream.Stream, error) {
	l.mu.Lock()
	st := s.stream
	l.mu.Unlock()
	if st != nil {
		return st, nil
	}
	name, _ := l.names(queue)
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	st, err := l.js.Stream(rctx, name)
	if err != nil {
		return nil, l.streamErr(queue, err)
	}
	l.mu.Lock()
	s.stream = st
	l.mu.Unlock()
	return st, nil
}

func (l *Log) streamErr(queue string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		l.forget(queue)
		return fmt.Errorf("%w: %q", wal.ErrNoQueue, queue)
	}
	return fmt.Errorf("jswal: queue %q: %w", queue, err)
}

// Create creates the queue's stream, placed by Options.Placement.
// Errors: wal.ErrExists, wal.ErrInvalid.
func (l *Log) Create(ctx context.Context, queue string) error {
	return l.CreatePlaced(ctx, queue, l.o.Placement)
}

// CreatePlaced creates the queue's stream on servers carrying every tag
// in tags (a broker's labels, such as its zone), instead of
// Options.Placement: with it a placement policy like zone-spread puts
// queues in real zones. Errors: wal.ErrExists, wal.ErrInvalid, and
// JetStream's own when no server matches the tags.
func (l *Log) CreatePlaced(ctx context.Context, queue string, tags []string) (err error) {
	defer l.mark(ctx, &err)
	if _, err := l.q(queue); err != nil {
		return err
	}
	name, subj := l.names(queue)
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	if _, err := l.js.Stream(rctx, name); err == nil {
		return fmt.Errorf("%w: %q", wal.ErrExists, queue)
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("jswal: create %q: %w", queue, err)
	}
	cfg := jetstream.StreamConfig{
		Name:        name,
		Description: "hostd physical queue " + queue,
		Subjects:    []string{subj, l.fenceSubject(queue)},
		Storage:     jetstream.FileStorage,
		Replicas:    l.o.Replicas,
		Duplicates:  l.o.Duplicates,
		MaxMsgSize:  int32(l.o.MaxRecordBytes + Envelope),
		AllowDirect: true,
		Metadata:    map[string]string{metaQueue: queue},
	}
	if l.o.Storage == Memory {
		cfg.Storage = jetstream.MemoryStorage
	}
	if len(tags) > 0 {
		cfg.Placement = &jetstream.Placement{Tags: tags}
	}
	if _, err := l.js.CreateStream(rctx, cfg); err != nil {
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("%w: %q", wal.ErrExists, queue)
		}
		return fmt.Errorf("jswal: create %q: %w", queue, err)
	}
	return nil
}

// Delete deletes the queue's stream. Errors: wal.ErrNoQueue.
func (l *Log) Delete(ctx context.Context, queue string) (err error) {
	defer l.mark(ctx, &err)
	s, err := l.q(queue)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name, _ := l.names(queue)
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	err = l.js.DeleteStream(rctx, name)
	l.forget(queue)
	if err != nil {
		return l.streamErr(queue, err)
	}
	return nil
}

// Queues lists the queues whose names start with prefix, in name order.
func (l *Log) Queues(ctx context.Context, prefix string) (_ []string, err error) {
	defer l.mark(ctx, &err)
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	lister := l.js.ListStreams(rctx, jetstream.WithStreamListSubject(l.o.StreamPrefix+".q.>"))
	var out []string
	for info := range lister.Info() {
		q, ok := info.Config.Metadata[metaQueue]
		if ok && strings.HasPrefix(q, prefix) && strings.HasPrefix(info.Config.Name, l.o.StreamPrefix+"_") {
			out = append(out, q)
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("jswal: list queues: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

// state returns the stream's sequence range: first and last sequence as
// JetStream reports them.
func (l *Log) state(ctx context.Context, queue string) (jetstream.Stream, jetstream.StreamState, error) {
	s, err := l.q(queue)
	if err != nil {
		return nil, jetstream.StreamState{}, err
	}
	st, err := l.stream(ctx, queue, s)
	if err != nil {
		return nil, jetstream.StreamState{}, err
	}
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	info, err := st.Info(rctx)
	if err != nil {
		return nil, jetstream.StreamState{}, l.streamErr(queue, err)
	}
	return st, info.State, nil
}

// minMax turns a stream's state into offsets: offset = sequence - 1, Max
// is the last sequence (the next offset), Min the first retained offset.
func minMax(ss jetstream.StreamState) (uint64, uint64) {
	mx := ss.LastSeq
	mn := mx
	if ss.FirstSeq > 0 && ss.FirstSeq-1 < mx {
		mn = ss.FirstSeq - 1
	}
	return mn, mx
}

// Bounds returns the retained range. Bytes is the bytes JetStream retains
// for the queue (not, as on the embedded WAL, every byte ever appended).
// Errors: wal.ErrNoQueue.
func (l *Log) Bounds(ctx context.Context, queue string) (_ wal.Bounds, err error) {
	defer l.mark(ctx, &err)
	st, ss, err := l.state(ctx, queue)
	if err != nil {
		return wal.Bounds{}, err
	}
	mn, mx := minMax(ss)
	b := wal.Bounds{Min: mn, Max: mx, Bytes: ss.Bytes}
	if mx > mn {
		if d, err := l.get(ctx, queue, st, mx); err == nil {
			b.LastTick, b.Sealed = d.entry.Tick, d.seal
		}
	}
	return b, nil
}

// Min returns the first retained offset.
func (l *Log) Min(ctx context.Context, queue string) (uint64, error) {
	_, ss, err := l.state(ctx, queue)
	mn, _ := minMax(ss)
	return mn, err
}

// Max returns the next offset to be assigned.
func (l *Log) Max(ctx context.Context, queue string) (uint64, error) {
	_, ss, err := l.state(ctx, queue)
	_, mx := minMax(ss)
	return mx, err
}

// get reads the message at stream sequence seq.
func (l *Log) get(ctx context.Context, queue string, st jetstream.Stream, seq uint64) (decoded, error) {
	return l.getReq(ctx, queue, st, seq, "")
}

// getLast reads the last message on subject subj (jetstream.ErrMsgNotFound
// if there is none).
func (l *Log) getLast(ctx context.Context, queue string, st jetstream.Stream, subj string) (decoded, error) {
	return l.getReq(ctx, queue, st, 0, subj)
}

func (l *Log) getReq(ctx context.Context, queue string, st jetstream.Stream, seq uint64, lastBySubj string) (decoded, error) {
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	// The stream leader's message get, not a direct get: a direct get may
	// be answered by a replica that has not stored seq yet, and the tail
	// a writer fences or the seal it checks must be the leader's.
	req, _ := json.Marshal(struct {
		Seq        uint64 `json:"seq,omitempty"`
		LastBySubj string `json:"last_by_subj,omitempty"`
	}{seq, lastBySubj})
	resp, err := l.nc.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+st.CachedInfo().Config.Name, req)
	if err != nil {
		return decoded{}, err
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     uint16 `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Sequence uint64 `json:"seq"`
			Header   []byte `json:"hdrs"`
			Data     []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return decoded{}, fmt.Errorf("jswal: message get: %w", err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == uint16(jetstream.JSErrCodeMessageNotFound) {
			return decoded{}, jetstream.ErrMsgNotFound
		}
		if r.Error.ErrCode == uint16(jetstream.JSErrCodeStreamNotFound) {
			return decoded{}, jetstream.ErrStreamNotFound
		}
		return decoded{}, fmt.Errorf("jswal: message get: %w", &jetstream.APIError{Code: r.Error.Code,
			ErrorCode: jetstream.ErrorCode(r.Error.ErrCode), Description: r.Error.Description})
	}
	if r.Message == nil {
		return decoded{}, errors.New("jswal: message get: empty answer")
	}
	var h nats.Header
	if len(r.Message.Header) > 0 {
		if h, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return decoded{}, fmt.Errorf("jswal: queue %q offset %d: headers: %w", queue, seq-1, err)
		}
	}
	d, err := decodeMsg(r.Message.Sequence, h, r.Message.Data)
	if err != nil {
		return d, fmt.Errorf("jswal: queue %q offset %d: %w", queue, seq-1, err)
	}
	return d, nil
}

// Read returns up to limit entries from offset from on, skipping hostd's
// term-fence records (their offsets are gaps). Errors: wal.ErrNoQueue,
// *wal.RangeError, wal.ErrInvalid.
func (l *Log) Read(ctx context.Context, queue string, from uint64, limit int) (_ []wal.Entry, err error) {
	defer l.mark(ctx, &err)
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit must be > 0, got %d", wal.ErrInvalid, limit)
	}
	st, ss, err := l.state(ctx, queue)
	if err != nil {
		return nil, err
	}
	mn, mx := minMax(ss)
	if from < mn || from > mx {
		return nil, &wal.RangeError{Queue: queue, Offset: from, Min: mn, Max: mx}
	}
	var out []wal.Entry
	seq := from + 1
	for seq <= mx && len(out) < limit {
		msgs, err := l.directBatch(ctx, st.CachedInfo().Config.Name, seq, min(limit-len(out), 1024))
		if err != nil {
			return nil, fmt.Errorf("jswal: read %q from %d: %w", queue, seq-1, err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, d := range msgs {
			if d.entry.Offset+1 > mx {
				break // appended after our bounds: the next read sees it
			}
			if !d.fence && !d.seal && len(out) < limit {
				out = append(out, d.entry)
			}
			seq = d.entry.Offset + 2
		}
		if msgs[len(msgs)-1].entry.Offset+1 >= mx {
			break
		}
	}
	// A direct get may be answered by a replica behind the leader, whose
	// bounds we read: fetch what it lacked from the leader, one message at
	// a time (only then).
	for ; seq <= mx && len(out) < limit; seq++ {
		d, err := l.get(ctx, queue, st, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // trimmed while we read
		}
		if err != nil {
			return nil, fmt.Errorf("jswal: read %q at %d: %w", queue, seq-1, err)
		}
		if !d.fence && !d.seal {
			out = append(out, d.entry)
		}
	}
	return out, nil
}

// directBatch reads up to n messages of stream from sequence seq on with
// one batched direct get (nats-server 2.11+): the server sends the
// messages to an inbox, then an end-of-batch status. Deleted sequences
// are skipped by the server.
func (l *Log) directBatch(ctx context.Context, stream string, seq uint64, n int) ([]decoded, error) {
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(struct {
		Seq   uint64 `json:"seq"`
		Batch int    `json:"batch"`
	}{seq, n})
	if err := l.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, err
	}
	var out []decoded
	for {
		m, err := sub.NextMsgWithContext(rctx)
		if err != nil {
			return nil, err
		}
		if st := m.Header.Get("Status"); st != "" {
			switch st {
			case "204", "404": // end of batch; nothing (more) there
				return out, nil
			default:
				code, _ := strconv.Atoi(st)
				return nil, fmt.Errorf("direct get: %w", &jetstream.APIError{Code: code, Description: m.Header.Get("Description")})
			}
		}
		s, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil || s < seq {
			return nil, fmt.Errorf("direct get: bad sequence %q", m.Header.Get("Nats-Sequence"))
		}
		d, err := decodeMsg(s, m.Header, m.Data)
		if err != nil {
			return nil, fmt.Errorf("offset %d: %w", s-1, err)
		}
		out = append(out, d)
		if len(out) == n {
			// The server still sends its end-of-batch status; we need
			// nothing more and unsubscribe.
			return out, nil
		}
	}
}

// Wait blocks until an entry at or past offset can be read or ctx ends.
// It listens to the queue's subject (every append notifies) and looks
// again every PollInterval in case a notification was missed.
func (l *Log) Wait(ctx context.Context, queue string, offset uint64) (err error) {
	defer l.mark(ctx, &err)
	if _, err := l.q(queue); err != nil {
		return err
	}
	sub, err := l.nc.SubscribeSync(l.anySubject(queue))
	if err != nil {
		return fmt.Errorf("jswal: wait on %q: %w", queue, err)
	}
	defer sub.Unsubscribe()
	// A notification may arrive before the stream has stored (and, with
	// replicas, committed) the message: after one, look again soon and
	// back off towards PollInterval.
	d := l.o.PollInterval
	for {
		ok, err := l.readable(ctx, queue, offset)
		if err != nil || ok {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, d)
		_, err = sub.NextMsgWithContext(wctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err == nil:
			d = min(5*time.Millisecond, l.o.PollInterval)
		case errors.Is(err, context.DeadlineExceeded):
			d = min(2*d, l.o.PollInterval)
		default:
			return fmt.Errorf("jswal: wait on %q: %w", queue, err)
		}
	}
}

// readable reports whether an entry (not a fence) exists at or past
// offset, or offset was trimmed (a read there reports the range).
func (l *Log) readable(ctx context.Context, queue string, offset uint64) (bool, error) {
	st, ss, err := l.state(ctx, queue)
	if err != nil {
		return false, err
	}
	mn, mx := minMax(ss)
	if offset < mn {
		return true, nil
	}
	if mx <= offset {
		if mx > mn {
			if d, err := l.get(ctx, queue, st, mx); err == nil && d.seal {
				return false, fmt.Errorf("%w: %q ends at %d", wal.ErrSealed, queue, mx)
			}
		}
		return false, nil
	}
	ents, err := l.Read(ctx, queue, offset, 1)
	if err == nil && len(ents) == 0 {
		// Only fences and a seal between offset and Max?
		if d, gerr := l.get(ctx, queue, st, mx); gerr == nil && d.seal {
			return false, fmt.Errorf("%w: %q ends at %d", wal.ErrSealed, queue, mx)
		}
	}
	if errors.Is(err, wal.ErrOutOfRange) {
		return true, nil
	}
	return len(ents) > 0, err
}

// NextHint returns the next offset from the writer's cached tail when it
// has one, else Max.
func (l *Log) NextHint(ctx context.Context, queue string) (_ uint64, err error) {
	defer l.mark(ctx, &err)
	s, err := l.q(queue)
	if err != nil {
		return 0, err
	}
	if s.mu.TryLock() {
		loaded, tail := s.loaded, s.tail
		s.mu.Unlock()
		if loaded {
			return tail, nil
		}
	}
	return l.Max(ctx, queue)
}

// Trim purges the entries below to (clamped to Max) and returns the new
// Min. The queue's last fence (or seal) is what tells a writer of an
// older term that it was fenced, so it must outlive retention: if it is
// below to, a copy of it is appended first (ordered against other fences
// only), then the data below to and the older fences are purged. The
// copy takes an offset, like every fence.
func (l *Log) Trim(ctx context.Context, queue string, to uint64) (_ uint64, err error) {
	defer l.mark(ctx, &err)
	s, err := l.q(queue)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ss, err := l.state(ctx, queue)
	if err != nil {
		return 0, err
	}
	mn, mx := minMax(ss)
	to = min(to, mx)
	if to <= mn {
		return mn, nil
	}
	_, data := l.names(queue)
	fsubj := l.fenceSubject(queue)
	f, err := l.getLast(ctx, queue, st, fsubj)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return 0, fmt.Errorf("jswal: trim %q: %w", queue, err)
	case f.entry.Offset < to:
		kind := byte(kindFence)
		if f.seal {
			kind = kindSeal
		}
		m := l.msg(fsubj, f.term, l.pseq.Add(1), encodeBody(kind, f.entry.Tick, nil, nil))
		s.fenceSeq = f.entry.Offset + 1
		if _, err := l.publishFence(ctx, queue, s, m); err != nil {
			return 0, fmt.Errorf("jswal: trim %q: carry the fence forward: %w", queue, err)
		}
		s.loaded = false
	}
	rctx, cancel := l.rctx(ctx)
	defer cancel()
	if err := st.Purge(rctx, jetstream.WithPurgeSubject(data), jetstream.WithPurgeSequence(to+1)); err != nil {
		return 0, fmt.Errorf("jswal: trim %q: %w", queue, l.streamErr(queue, err))
	}
	if err := st.Purge(rctx, jetstream.WithPurgeSubject(fsubj), jetstream.WithPurgeKeep(1)); err != nil {
		return 0, fmt.Errorf("jswal: trim %q: %w", queue, l.streamErr(queue, err))
	}
	_, ss, err = l.state(ctx, queue)
	if err != nil {
		return 0, err
	}
	mn, _ = minMax(ss)
	return mn, nil
}

// nextTick returns a tick above every tick this process handed out or saw
// at a queue's tail: strictly increasing per queue even across writers
// whose clocks disagree.
func (l *Log) nextTick(n int) uint64 {
	l.tmu.Lock()
	defer l.tmu.Unlock()
	t := l.lastTick + 1
	if now := l.o.Clock.Now().UnixNano(); now > 0 && uint64(now) > t {
		t = uint64(now)
	}
	l.lastTick = t + uint64(n) - 1
	return t
}

func (l *Log) observeTick(t uint64) {
	l.tmu.Lock()
	if t > l.lastTick {
		l.lastTick = t
	}
	l.tmu.Unlock()
}

// load reads the queue's state (with s.mu held): its last sequence, the
// tick of its last message and its last fence (or seal) with the fence's
// term. A fence of a higher term than the writer's is a *FencedError; a
// lower one is superseded now (a fence at the writer's term, expecting
// the last fence's sequence on the fence subject), so no writer of an
// older term can append after this writer's first append: its data
// append expects a last sequence the fence has moved, and the fence it
// then reads is newer.
func (l *Log) load(ctx context.Context, queue string, s *qstate) error {
	// Another fencer may land between our reading the last fence and
	// publishing ours (which then conflicts): read again, for up to twice
	// RequestTimeout. Data appends never conflict with a fence.
	deadline := time.Now().Add(2 * l.o.RequestTimeout)
	for {
		err := l.loadOnce(ctx, queue, s)
		if !errors.Is(err, errConflict) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
	}
}

func (l *Log) loadOnce(ctx context.Context, queue string, s *qstate) error {
	if s.loaded {
		return nil
	}
	st, ss, err := l.state(ctx, queue)
	if err != nil {
		return err
	}
	s.tail, s.tailTick, s.fenceSeq, s.fenceTerm, s.sealed = ss.LastSeq, 0, 0, 0, false
	if ss.LastSeq > 0 {
		f, err := l.getLast(ctx, queue, st, l.fenceSubject(queue))
		switch {
		case err == nil:
			s.fenceSeq, s.fenceTerm, s.sealed = f.entry.Offset+1, f.term, f.seal
			if s.fenceSeq == s.tail {
				s.tailTick = f.entry.Tick
			}
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("jswal: read last fence of %q: %w", queue, err)
		}
		if mn, mx := minMax(ss); mx > mn && s.fenceSeq != s.tail {
			d, err := l.get(ctx, queue, st, mx)
			if err != nil {
				return fmt.Errorf("jswal: read tail of %q: %w", queue, err)
			}
			s.tailTick = d.entry.Tick
		}
		l.observeTick(s.tailTick)
	}
	term := l.term.Load()
	if s.fenceTerm > term {
		if l.o.OnFenced != nil {
			l.fencedBy.Do(l.o.OnFenced)
		}
		return &FencedError{Queue: queue, Term: term, By: s.fenceTerm}
	}
	s.loaded = true
	if s.sealed {
		return nil // nothing will be appended: no fence needed
	}
	if s.fenceTerm < term {
		if err := l.fenceLocked(ctx, queue, s, term); err != nil {
			s.loaded = false
			return err
		}
	}
	return nil
}

// Fence raises the writer's term to term (if higher) and writes a term
// fence into queue unless its last fence already carries that term: after
// it, appends of writers with an older term fail with a *FencedError
// (theirs carry an expected last sequence the fence has moved, and the
// last fence they then read is of a newer term). Fences have a subject of
// their own and are ordered against each other only, so a writer that
// keeps appending cannot keep a fence out. Reads skip fence records; each
// takes one offset. Call it for every queue on taking office (appends
// also fence lazily, before the term's first write to each queue).
// Errors: *FencedError if the queue already holds a newer term.
func (l *Log) Fence(ctx context.Context, queue string, term uint64) (err error) {
	defer l.mark(ctx, &err)
	for {
		cur := l.term.Load()
		if term <= cur || l.term.CompareAndSwap(cur, term) {
			break
		}
	}
	s, err := l.q(queue)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = false // read the real tail: fencing on a stale one is useless
	return l.load(ctx, queue, s)
}

func (l *Log) fenceLocked(ctx context.Context, queue string, s *qstate, term uint64) error {
	m := l.msg(l.fenceSubject(queue), term, l.pseq.Add(1), encodeBody(kindFence, l.nextTick(1), nil, nil))
	seq, err := l.publishFence(ctx, queue, s, m)
	if err != nil {
		return err
	}
	s.tail, s.fenceSeq, s.fenceTerm = seq, seq, term
	l.mFences.Add(ctx, 1)
	l.o.Logger.Debug("fenced queue", "queue", queue, "term", term, "offset", seq-1)
	return nil
}

// publishFence publishes a fence or seal m expecting s.fenceSeq as the
// last sequence of the fence subject: it conflicts with other fences
// only, never with data appends. A wrong sequence (another fence landed,
// or our own earlier attempt whose ack was lost) is errConflict with
// s.loaded cleared: the caller reads the fences again and decides anew.
func (l *Log) publishFence(ctx context.Context, queue string, s *qstate, m *nats.Msg) (uint64, error) {
	var lastErr error
	for attempt := 0; attempt < 4 && ctx.Err() == nil; attempt++ {
		rctx, cancel := l.rctx(ctx)
		ack, err := l.js.PublishMsg(rctx, m, jetstream.WithExpectLastSequencePerSubject(s.fenceSeq), jetstream.WithRetryAttempts(0))
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		lastErr = err
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
			s.loaded = false
			return 0, errConflict
		case errors.As(err, &apiErr):
			return 0, fmt.Errorf("jswal: fence %q: %w", queue, err)
		case errors.Is(err, jetstream.ErrNoStreamResponse):
			time.Sleep(100 * time.Millisecond)
		}
	}
	s.loaded = false
	return 0, fmt.Errorf("%w: fence of %q: %w", ErrUnknownOutcome, queue, errors.Join(lastErr, ctx.Err()))
}

// Seal closes queue: a seal record is appended on the fence subject
// (ordered against fences, and moving the last sequence every data append
// expects) and every later append, by any writer,
// fails with wal.ErrSealed; Wait past the end returns wal.ErrSealed. The
// seal takes one offset (reads skip it): Seal.End is the exclusive end,
// no entry is ever at or past it. Sealing a sealed queue returns its seal.
// Errors: wal.ErrNoQueue, *FencedError.
func (l *Log) Seal(ctx context.Context, queue string) (_ wal.Seal, err error) {
	defer l.mark(ctx, &err)
	s, err := l.q(queue)
	if err != nil {
		return wal.Seal{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = false
	for attempt := 0; ; attempt++ {
		if err := l.load(ctx, queue, s); err != nil {
			return wal.Seal{}, err
		}
		if s.sealed {
			return wal.Seal{End: s.tail, LastTick: s.tailTick}, nil
		}
		last := s.tailTick // the seal carries the last record's tick
		m := l.msg(l.fenceSubject(queue), l.term.Load(), l.pseq.Add(1), encodeBody(kindSeal, last, nil, nil))
		seq, err := l.publishFence(ctx, queue, s, m)
		if errors.Is(err, errConflict) && attempt < 1000 && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return wal.Seal{}, err
		}
		s.tail, s.fenceSeq, s.fenceTerm, s.sealed = seq, seq, l.term.Load(), true
		return wal.Seal{End: seq, LastTick: last}, nil
	}
}

func sealedErr(queue string, tail uint64, stored int, out []wal.Entry) error {
	err := fmt.Errorf("%w: %q at offset %d", wal.ErrSealed, queue, tail)
	if stored > 0 {
		return fmt.Errorf("jswal: %d records stored at offsets %d..%d: %w", stored, out[0].Offset, out[stored-1].Offset, err)
	}
	return err
}

func (l *Log) msg(subj string, term, pseq uint64, body []byte) *nats.Msg {
	m := nats.NewMsg(subj)
	m.Header.Set(hdrTerm, strconv.FormatUint(term, 10))
	m.Header.Set(hdrProducer, l.o.ProducerID)
	m.Header.Set(hdrProdSeq, strconv.FormatUint(pseq, 10))
	m.Data = body
	return m
}

// testDropAck, set by tests only, turns a stored publish into a timeout
// (the ack lost on its way back), to exercise the unknown-outcome path.
var testDropAck func(*nats.Msg) bool

// pipeline publishes ms (records recs, in order) at once, message k
// expecting s.tail+k as the last sequence, and returns the sequences of
// the leading messages that are stored (with s.mu held; s.tail is not
// updated). The rest were not stored; the caller re-reads the tail and
// goes on. An ack that never came is settled by position: message k can
// only be at s.tail+k+1, so the leader's message there tells (producer id
// and sequence). If that cannot be read, the error is ErrUnknownOutcome.
func (l *Log) pipeline(ctx context.Context, queue string, s *qstate, ms []*nats.Msg, recs []wal.Record) ([]uint64, error) {
	st, err := l.stream(ctx, queue, s)
	if err != nil {
		return nil, err
	}
	base := s.tail
	// Record k expects the stream's last sequence base+k AND the last
	// message id of record k-1: a sequence alone could be matched by
	// someone else's message (a fence) taking record k-1's place, and
	// record k would land after it. So every record of a batch has a
	// Msg-Id: its Record.ID, or a generated one.
	ids := make([]string, len(ms))
	for k, m := range ms {
		ids[k] = recs[k].ID
		if ids[k] == "" {
			ids[k] = l.o.ProducerID + "/" + m.Header.Get(hdrProdSeq)
		}
	}
	futs := make([]jetstream.PubAckFuture, 0, len(ms))
	for k, m := range ms {
		opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequence(base + uint64(k)), jetstream.WithRetryAttempts(0),
			jetstream.WithMsgID(ids[k])}
		if k > 0 {
			opts = append(opts, jetstream.WithExpectLastMsgID(ids[k-1]))
		}
		f, err := l.js.PublishMsgAsync(m, opts...)
		if err != nil {
			break // the rest is not sent: not stored
		}
		futs = append(futs, f)
	}
	type outcome struct {
		seq     uint64
		dup     bool
		ok      bool
		unknown bool
		err     error
	}
	outs := make([]outcome, len(futs))
	for k, f := range futs {
		select {
		case ack := <-f.Ok():
			outs[k] = outcome{seq: ack.Sequence, dup: ack.Duplicate, ok: true}
			if testDropAck != nil && testDropAck(ms[k]) {
				outs[k] = outcome{unknown: true}
			}
		case err := <-f.Err():
			var apiErr *jetstream.APIError
			switch {
			case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
				apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
				outs[k] = outcome{} // refused: not stored
			case errors.As(err, &apiErr):
				outs[k] = outcome{err: fmt.Errorf("jswal: append to %q: %w", queue, err)}
			case errors.Is(err, jetstream.ErrNoStreamResponse):
				outs[k] = outcome{}
			default:
				outs[k] = outcome{unknown: true}
			}
		case <-ctx.Done():
			outs[k] = outcome{unknown: true}
		}
	}
	var seqs []uint64
	tail := base
	k := 0
	for ; k < len(outs); k++ {
		o := outs[k]
		if o.unknown {
			pos := base + uint64(k) + 1 // the only place message k can be
			d, gerr := l.get(ctx, queue, st, pos)
			switch {
			case gerr == nil && d.prod == ms[k].Header.Get(hdrProducer) && strconv.FormatUint(d.pseq, 10) == ms[k].Header.Get(hdrProdSeq):
				o = outcome{seq: pos, ok: true}
			case gerr == nil || errors.Is(gerr, jetstream.ErrMsgNotFound):
				o = outcome{} // not there: not stored
			default:
				return seqs, fmt.Errorf("%w: append to %q at offset %d: %w", ErrUnknownOutcome, queue, pos-1, gerr)
			}
		}
		if o.err != nil {
			return seqs, o.err
		}
		if !o.ok {
			break
		}
		if !o.dup {
			if o.seq != tail+1 {
				return seqs, fmt.Errorf("jswal: append to %q: record stored at offset %d, expected %d", queue, o.seq-1, tail)
			}
			tail = o.seq
		}
		seqs = append(seqs, o.seq)
	}
	// Nothing after the first record not stored may be stored (each
	// expected its predecessor's sequence) unless another writer of this
	// term interleaved: then the batch's order is lost, say so.
	for k++; k < len(outs); k++ {
		if outs[k].ok && !outs[k].dup {
			return seqs, fmt.Errorf("jswal: append to %q: another writer interleaved with the batch (record %d stored at offset %d)", queue, k, outs[k].seq-1)
		}
	}
	return seqs, nil
}

// errConflict is publish's report of a wrong expected last sequence that
// was not this writer's own earlier attempt.
var errConflict = errors.New("jswal: another writer extended the queue")

// publish stores m at s.tail+1 (expected last sequence = s.tail) and
// returns its sequence, with s.mu held. An attempt whose outcome is
// unknown (timeout, lost connection) is retried with the same expected
// sequence and Msg-Id; a wrong-last-sequence answer after such an attempt
// is resolved by reading s.tail+1: if it holds this writer's message (its
// producer id and sequence), that attempt was stored. Any other conflict
// is errConflict (s.loaded is cleared), and a stale ID answered as a
// duplicate returns the first copy's sequence.
func (l *Log) publish(ctx context.Context, queue string, s *qstate, m *nats.Msg, id string) (uint64, error) {
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequence(s.tail), jetstream.WithRetryAttempts(0)}
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	unknown := false
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			l.mRetries.Add(ctx, 1)
		}
		if err := ctx.Err(); err != nil {
			break
		}
		rctx, cancel := l.rctx(ctx)
		ack, err := l.js.PublishMsg(rctx, m, opts...)
		cancel()
		if err == nil && testDropAck != nil && testDropAck(m) {
			err = context.DeadlineExceeded // stored, but the writer never hears it
		}
		if err == nil {
			return ack.Sequence, nil
		}
		lastErr = err
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
			s.loaded = false
			if unknown {
				// An earlier attempt may be the message the sequence
				// now expects: it can only be at s.tail+1.
				st, gerr := l.stream(ctx, queue, s)
				var d decoded
				if gerr == nil {
					d, gerr = l.get(ctx, queue, st, s.tail+1)
				}
				switch {
				case gerr == nil && d.prod == m.Header.Get(hdrProducer) && strconv.FormatUint(d.pseq, 10) == m.Header.Get(hdrProdSeq):
					return s.tail + 1, nil
				case gerr != nil && !errors.Is(gerr, jetstream.ErrMsgNotFound):
					return 0, fmt.Errorf("%w: append to %q at offset %d: %w", ErrUnknownOutcome, queue, s.tail, gerr)
				}
			}
			return 0, errConflict
		case errors.Is(err, jetstream.ErrNoStreamResponse):
			// Nobody stored it: the stream is gone or has no leader now.
			if _, _, serr := l.state(ctx, queue); errors.Is(serr, wal.ErrNoQueue) {
				return 0, serr
			}
			time.Sleep(100 * time.Millisecond)
		case errors.As(err, &apiErr):
			return 0, fmt.Errorf("jswal: append to %q: %w", queue, err)
		default:
			unknown = true // timeout, lost connection: it may have been stored
		}
	}
	if unknown {
		s.loaded = false
		return 0, fmt.Errorf("%w: append to %q at offset %d: %w", ErrUnknownOutcome, queue, s.tail, errors.Join(lastErr, ctx.Err()))
	}
	return 0, fmt.Errorf("jswal: append to %q: %w", queue, errors.Join(lastErr, ctx.Err()))
}

// Append appends recs in order, each with the expected last sequence of
// the queue's tail and, if it has one, its ID as Nats-Msg-Id. A batch is
// not atomic on JetStream: an error after some records were stored
// reports them stored (a prefix of the batch); ErrUnknownOutcome says the
// failing record may be stored too — resolve with wal.AppendOnce from the
// offset in the error. A record whose ID JetStream saw within its
// duplicate window is not stored again: its entry has the first copy's
// offset. Errors: wal.ErrNoQueue, wal.ErrInvalid, wal.ErrTooLarge,
// wal.ErrClosed, *FencedError, ErrUnknownOutcome.
func (l *Log) Append(ctx context.Context, queue string, recs []wal.Record) (_ []wal.Entry, err error) {
	defer l.mark(ctx, &err)
	ctx, span := l.tracer.Start(ctx, "wal.jetstream.Append", trace.WithAttributes(
		attribute.String("hostd.wal.queue", queue), attribute.Int("hostd.wal.records", len(recs))))
	defer span.End()
	ents, err := l.append(ctx, queue, recs)
	if err != nil {
		span.RecordError(err)
		l.mFailures.Add(ctx, 1)
		return nil, err
	}
	l.mAppends.Add(ctx, 1)
	return ents, nil
}

func (l *Log) append(ctx context.Context, queue string, recs []wal.Record) ([]wal.Entry, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: empty batch", wal.ErrInvalid)
	}
	size := 0
	for i, r := range recs {
		if r.Kind != wal.KindData && r.Kind != wal.KindBroadcast && r.Kind != wal.KindMarker {
			return nil, fmt.Errorf("%w: record %d: kind %s cannot be appended", wal.ErrInvalid, i, r.Kind)
		}
		if r.Kind == wal.KindData {
			if err := wal.CheckProps(i, r.Props); err != nil {
				return nil, err
			}
		}
		if len(r.ID) > MaxIDBytes || strings.ContainsAny(r.ID, "\r\n") {
			return nil, fmt.Errorf("%w: record %d: ID must be at most %d bytes on one line", wal.ErrInvalid, i, MaxIDBytes)
		}
		n := recordSize(r)
		if n > l.o.MaxRecordBytes {
			return nil, fmt.Errorf("%w: record %d is %d bytes, max %d", wal.ErrTooLarge, i, n, l.o.MaxRecordBytes)
		}
		size += n
	}
	if size > l.o.MaxBatchBytes {
		return nil, fmt.Errorf("%w: batch is %d bytes, max %d", wal.ErrTooLarge, size, l.o.MaxBatchBytes)
	}
	s, err := l.q(queue)
	if err != nil {
		return nil, err
	}
	_, subj := l.names(queue)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Read the tail first: its tick (another writer's clock) bounds ours.
	if err := l.load(ctx, queue, s); err != nil {
		return nil, err
	}
	tick := l.nextTick(len(recs))
	out := make([]wal.Entry, 0, len(recs))
	conflicts := 0
	// backoff after a conflict with another writer of this term (not
	// hostd's model, which has one writer per queue, but it must not fail
	// spuriously): a growing random pause, within twice RequestTimeout.
	deadline := time.Now().Add(2 * l.o.RequestTimeout)
	backoff := func() bool {
		conflicts++
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Duration(rand.Int64N(int64(min(conflicts, 20)) * int64(time.Millisecond))))
		return true
	}
	for i := 0; i < len(recs); {
		if err := l.load(ctx, queue, s); err != nil {
			return nil, err
		}
		if s.sealed {
			return nil, sealedErr(queue, s.tail, i, out)
		}
		if len(recs)-i > 1 {
			// Several records: publish them all at once, each expecting
			// the previous one's sequence, and settle what got stored.
			ms := make([]*nats.Msg, len(recs)-i)
			for k := range ms {
				r := recs[i+k]
				ms[k] = l.msg(subj, l.term.Load(), l.pseq.Add(1), encodeBody(byte(r.Kind), tick+uint64(i+k), r.Props, r.Payload))
				if r.ID != "" {
					ms[k].Header.Set(hdrID, r.ID)
				}
			}
			seqs, err := l.pipeline(ctx, queue, s, ms, recs[i:])
			for k, seq := range seqs {
				r := recs[i+k]
				if seq > s.tail {
					s.tail, s.tailTick = seq, tick+uint64(i+k)
				}
				out = append(out, wal.Entry{Offset: seq - 1, Tick: tick + uint64(i+k), Payload: r.Payload, Props: r.Props, Kind: r.Kind, ID: r.ID})
			}
			i += len(seqs)
			if err != nil {
				if i > 0 {
					return nil, fmt.Errorf("jswal: %d of %d records stored at offsets %d..%d: %w", i, len(recs), out[0].Offset, out[i-1].Offset, err)
				}
				return nil, err
			}
			if i < len(recs) {
				s.loaded = false // the rest was refused: read the tail again
				if !backoff() {
					return nil, fmt.Errorf("jswal: %d of %d records stored: %w", i, len(recs), errConflict)
				}
			}
			continue
		}
		r := recs[i]
		t := tick + uint64(i)
		m := l.msg(subj, l.term.Load(), l.pseq.Add(1), encodeBody(byte(r.Kind), t, r.Props, r.Payload))
		if r.ID != "" {
			m.Header.Set(hdrID, r.ID)
		}
		seq, err := l.publish(ctx, queue, s, m, r.ID)
		if errors.Is(err, errConflict) && backoff() {
			continue // another writer of this term won the tail: read it again
		}
		if err != nil {
			if i > 0 {
				return nil, fmt.Errorf("jswal: %d of %d records stored at offsets %d..%d: %w", i, len(recs), out[0].Offset, out[i-1].Offset, err)
			}
			return nil, err
		}
		if seq > s.tail {
			s.tail, s.tailTick = seq, t
		}
		out = append(out, wal.Entry{Offset: seq - 1, Tick: t, Payload: r.Payload, Props: r.Props, Kind: r.Kind, ID: r.ID})
		i++
	}
	return out, nil
}
