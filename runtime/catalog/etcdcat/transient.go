package etcdcat

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hostd-dev/hostd/runtime/catalog"
)

// etcdErr wraps an error of an etcd request with what was being done and,
// when etcd says the failure passes (a leader change, no leader, no
// quorum, a lost connection, etcd's own request timeout),
// catalog.ErrUnavailable, so the API answers 503 + Retry-After instead of
// 500.
func etcdErr(what string, err error) error {
	if transient(err) {
		return fmt.Errorf("catalog: etcd: %s: %w: %w", what, catalog.ErrUnavailable, err)
	}
	return fmt.Errorf("catalog: etcd: %s: %w", what, err)
}

// transient reports whether err is an etcd failure that passes. The
// caller's own deadline or cancellation is not: it is the caller's.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch rpctypes.Error(err) {
	case rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrNotCapable, rpctypes.ErrStopped,
		rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrTooManyRequests, rpctypes.ErrUnhealthy:
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
			return true
		}
	}
	return false
}
