package etcdcat

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// etcd failures that pass (elections, lost quorum or connection) become
// catalog.ErrUnavailable (503 + Retry-After at the API); the caller's own
// deadline, a compare failure or a size refusal do not.
func TestTransientErrorsAreUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrGRPCLeaderChanged, true},
		{rpctypes.ErrGRPCNoLeader, true},
		{rpctypes.ErrGRPCTimeout, true},
		{rpctypes.ErrGRPCTimeoutDueToConnectionLost, true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{rpctypes.ErrGRPCRequestTooLarge, false},
		{rpctypes.ErrGRPCCompacted, false},
		{errors.New("boom"), false},
	} {
		err := etcdErr("read", tc.err)
		if got := errors.Is(err, catalog.ErrUnavailable); got != tc.want {
			t.Errorf("%v: unavailable %v, want %v (%v)", tc.err, got, tc.want, err)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%v: the cause is lost: %v", tc.err, err)
		}
	}
	if err := etcdErr("x", fmt.Errorf("wrapped: %w", rpctypes.ErrGRPCNoLeader)); !errors.Is(err, catalog.ErrUnavailable) {
		t.Errorf("a wrapped no-leader error is not unavailable: %v", err)
	}
}
