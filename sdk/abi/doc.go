// Package abi is hostd's plugin contract, ABI v1: the names of the host
// functions and guest exports, the handler kinds, result codes and host-call
// statuses, and the envelope codec for everything that crosses the
// host/guest boundary (messages, mapping-policy input/output, resource
// keys, KV scan results, span attributes).
//
// It is imported by both sides: the host runtime (runtime/wasm) and the
// guest SDK (sdk), and it builds for the host and for wasip1 with the
// standard library only. Plugin authors do not use it directly (the SDK
// hides it) except for ResourceKey and LockMode.
//
// docs/plugin-abi.md describes the ABI byte by byte, so a plugin can be
// written in any language that compiles to WebAssembly.
//
// # Compatibility
//
// Every envelope starts with a version byte; a module declares its ABI
// version by exporting ExportABIMarker. Changing anything in this package
// that changes bytes on the wire is a new ABI version.
//
// Decoders never panic and bound their allocations by the input length;
// they are fuzzed (FuzzDecode*).
package abi
