// Package ackcallback is examples/ack-callback: a plugin (./plugin) with a
// validator and an ack callback, a hostd config (hostd.yaml), and a test
// that runs them end to end in a real daemon. See README.md.
package ackcallback
