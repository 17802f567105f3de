// Package etcdcat is the catalog (runtime/catalog's Store contract) on
// etcd, for cluster mode. See docs/etcd-catalog.md for the design.
package etcdcat
