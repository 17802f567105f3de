package cluster

import (
	"context"
	"fmt"

	"github.com/hostd-dev/hostd/runtime/catalog"
	"github.com/hostd-dev/hostd/runtime/catalog/etcdcat"
)

// etcdCatalog adapts the etcd catalog to termCatalog.
type etcdCatalog struct{ *etcdcat.Store }

func (c etcdCatalog) fenced(key string, term int64, onFenced func()) catalog.Store {
	return c.WithFence(etcdcat.Fence{Key: key, Revision: term, OnFenced: onFenced})
}

func (c etcdCatalog) base() catalog.Store { return c.Store }

// openCatalog opens the etcd catalog from catalog.etcd on the node's
// client.
func openCatalog(ctx context.Context, n *Node) (termCatalog, error) {
	e := n.cfg.Catalog.Etcd
	st, err := etcdcat.Open(ctx, etcdcat.Options{
		Client:          n.cli,
		Prefix:          e.Prefix,
		MaxTxnOps:       e.MaxTxnOps,
		MaxRequestBytes: int(e.MaxRequestBytes),
		RequestTimeout:  e.RequestTimeout,
		Logger:          n.log.With("component", "catalog"),
		MeterProvider:   n.tel.MeterProvider,
		TracerProvider:  n.tel.TracerProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open the etcd catalog under %s: %w", e.Prefix, err)
	}
	return etcdCatalog{st}, nil
}
