// Package wire holds the JSON request and response types of hostd's HTTP
// API (/v1): the one definition shared by the server (host/api) and the Go
// client (client/).
//
// It is a leaf: it imports only the standard library, so that a program
// that imports the client does not build the daemon (its storage engine,
// Wasm runtime or telemetry SDK). Conversions between these types and the
// builtins' own types live in host/api; builtins never import wire.
//
// The field names and encodings here are the API contract. The reference
// is docs/openapi.json (served at GET /v1/openapi.json); docs/api.md is the
// guide. internal/apispec's TestSchemasMatchWire compares every type here
// with the schema of the same name in the spec, so a field added here must
// be added there.
//
// # Encoding rules
//
//   - Names are snake_case; optional fields are omitted when empty.
//   - Byte strings ([]byte) are standard base64 (encoding/json's default).
//   - Times are RFC 3339 with nanoseconds, UTC.
//   - Durations are Go duration strings ("30s", "1h30m").
//   - Time ticks (Unix nanoseconds, always above 2^53) are JSON strings of
//     decimal digits (type Tick), as protobuf's JSON mapping writes 64-bit
//     integers: JavaScript and jq would round them as numbers. Every other
//     integer in an answer stays at or below 2^53-1 (MaxSafeInteger).
//   - Lists in answers are [] rather than null.
//   - Lists are List[T]: {"items": [...], "next_page_token": ""}.
//   - Errors are ErrorResponse: {"error": {"code", "message", "details"}}.
package wire
