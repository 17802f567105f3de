// Package extismbench measures an ack-callback-sized plugin call through the
// Extism Go SDK, next to a native Go baseline run in the same process.
//
// It is a module of its own because the Extism go-sdk pins an older wazero
// (v1.9.0) than hostd (v1.12.0); keeping it here keeps it out of hostd's
// go.mod. The hostd side of the comparison lives in bench/plugins, which runs
// this package's TestExtismTable as a subprocess so that one command prints
// one table (see bench/plugins/README.md):
//
//	cd bench && HOSTD_BENCH=1 go test -run TestPluginCallTable -v ./plugins
//
// The guest (testdata/guest) does the same work as the native function and
// the hostd plugin: Parse, on a 256-byte and a 64-KiB payload. Since the
// Extism Go PDK is not on the module proxy, the guest calls Extism's host
// module directly exactly the way the PDK does (8 bytes of input per host
// call), so the figures are those an Extism Go plugin would see.
package extismbench
