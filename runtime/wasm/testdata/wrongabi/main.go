// Command wrongabi is a Wasm module that is not a hostd plugin: it was
// built without the SDK, so it lacks the ABI v1 exports, and it imports a
// host function hostd does not offer.
package main

//go:wasmimport hostd teleport
func teleport(x int32) int32

//go:wasmexport hostd_abi_v0
func marker() {}

//go:wasmexport run
func run() int32 { return teleport(1) }

func main() {}
