package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/propagation"

	"github.com/hostd-dev/hostd/host/api"
	"github.com/hostd-dev/hostd/wire"
)

// Fan-out: a request that concerns every replica (the trace routes, plugin
// reload) is answered by the replica it reaches by asking every member —
// itself in process, the others over HTTP at their advertise address,
// once, with the caller's Authorization and trace context and the hop
// header. A member that receives a request with the hop header answers
// for itself only (it never fans out again). A member that does not
// answer is reported, never fatal.

// Member-call outcomes (wire.TraceMember.Outcome,
// wire.PluginReloadMember.Outcome, the hostd.cluster.member_calls metric).
const (
	outcomeOK          = "ok"
	outcomeError       = "error"
	outcomeUnreachable = "unreachable"
)

// maxMemberAnswer bounds what one member's answer may hold (a trace's
// spans): a bigger answer counts as an error of that member.
const maxMemberAnswer = 256 << 20

// memberCall is one member's answer to a fanned-out request.
type memberCall struct {
	member  wire.ClusterMember
	self    bool
	status  int    // 0: unreachable
	body    []byte // the answer
	err     error  // why it is unreachable, or the error answer's message
	outcome string
}

// errorMessage is the message of an API error answer, or the status.
func (c *memberCall) errorMessage() string {
	var er wire.ErrorResponse
	if json.Unmarshal(c.body, &er) == nil && er.Error != nil {
		return er.Error.Code + ": " + er.Error.Message
	}
	return fmt.Sprintf("status %d", c.status)
}

// memberList reads the members from etcd (their session keys); this
// replica is always one, also before its record is written.
func (n *Node) memberList(ctx context.Context) ([]wire.ClusterMember, error) {
	resp, err := n.cli.Get(ctx, n.membersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, api.Unavailable("cannot read the members from etcd: %v", err)
	}
	var out []wire.ClusterMember
	self := false
	for _, kv := range resp.Kvs {
		var m wire.ClusterMember
		if err := json.Unmarshal(kv.Value, &m); err != nil || m.Name == "" {
			n.log.Warn("unreadable member record; skipping it", "key", string(kv.Key), "err", err)
			continue
		}
		self = self || m.Name == n.name
		out = append(out, m)
	}
	if !self {
		out = append(out, wire.ClusterMember{Name: n.name, Address: n.advertise})
	}
	slices.SortFunc(out, func(a, b wire.ClusterMember) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// fanOut sends r's method to path (with query) to every member at once
// and returns their answers in member-name order. op names the operation
// in the hostd.cluster.member_calls metric.
func (n *Node) fanOut(r *http.Request, op, pathQuery string) ([]*memberCall, error) {
	ms, err := n.memberList(r.Context())
	if err != nil {
		return nil, err
	}
	// Leave a quarter of the caller's deadline to merge and answer: a
	// member that hangs is reported unreachable, not the whole request
	// timed out.
	ctx := r.Context()
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*3/4))
		defer cancel()
	}
	calls := make([]*memberCall, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		calls[i] = &memberCall{member: m, self: m.Name == n.name}
		wg.Add(1)
		go func(c *memberCall) {
			defer wg.Done()
			n.callMember(ctx, r, c, pathQuery)
			n.m.memberCalls.Add(context.WithoutCancel(ctx), 1, opOutcome(op, c.outcome))
		}(calls[i])
	}
	wg.Wait()
	return calls, nil
}

// callMember asks one member (this replica in process).
func (n *Node) callMember(ctx context.Context, r *http.Request, c *memberCall, pathQuery string) {
	var body io.Reader
	if r.Method == http.MethodPost {
		body = http.NoBody
	}
	if c.self {
		req, err := http.NewRequestWithContext(ctx, r.Method, pathQuery, body)
		if err != nil {
			c.err, c.outcome = err, outcomeError
			return
		}
		copyCallerHeaders(r.Context(), req.Header, r.Header)
		req.Header.Set(HopHeader, n.name)
		rec := &recorder{header: http.Header{}}
		n.front.ServeHTTP(rec, req)
		c.status, c.body = rec.status, rec.buf.Bytes()
	} else {
		req, err := http.NewRequestWithContext(ctx, r.Method, strings.TrimSuffix(c.member.Address, "/")+pathQuery, body)
		if err != nil || req.URL.Host == "" {
			c.err, c.outcome = fmt.Errorf("unusable address %q", c.member.Address), outcomeUnreachable
			return
		}
		copyCallerHeaders(r.Context(), req.Header, r.Header)
		req.Header.Set(HopHeader, n.name)
		resp, err := n.transport.RoundTrip(req)
		if err != nil {
			n.log.Warn("member did not answer", "member", c.member.Name, "address", c.member.Address, "path", r.URL.Path, "err", err)
			c.err, c.outcome = err, outcomeUnreachable
			return
		}
		defer resp.Body.Close()
		c.status = resp.StatusCode
		c.body, err = io.ReadAll(io.LimitReader(resp.Body, maxMemberAnswer+1))
		if err != nil {
			c.err, c.outcome = fmt.Errorf("reading its answer: %w", err), outcomeUnreachable
			return
		}
		if len(c.body) > maxMemberAnswer {
			c.err, c.outcome = fmt.Errorf("its answer exceeds %d bytes", maxMemberAnswer), outcomeError
			return
		}
	}
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.status/100 == 2 {
		c.outcome = outcomeOK
		return
	}
	c.outcome = outcomeError
	c.err = fmt.Errorf("%s", c.errorMessage())
}

// copyCallerHeaders passes the caller's token on, and the trace context
// of ctx (the request's server span, or the caller's traceparent on an
// untraced route).
func copyCallerHeaders(ctx context.Context, dst, src http.Header) {
	if v := src.Values("Authorization"); len(v) > 0 {
		dst["Authorization"] = slices.Clone(v)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(dst))
	dst.Set("Accept", "application/json")
}

// recorder is a ResponseWriter that keeps the answer (this replica's own
// part of a fan-out).
type recorder struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.buf.Write(b)
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

// registerFanOut adds the front server's routes that reach every member.
func (n *Node) registerFanOut() {
	api.RegisterTraces(n.front, &clusterTraces{n: n, local: api.NewLocalTraces(n.cfg.Data.Dir)})
	// A reload compiles: each member may take up to plugins.init_timeout
	// (a cold compile takes seconds), more than a request usually may.
	n.front.Handle("POST /v1/plugins/reload", api.RoleAdmin, n.handleReload,
		api.WithTimeout(max(n.cfg.API.RequestTimeout, n.cfg.Plugins.InitTimeout)))
}
