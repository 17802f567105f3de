// Package wire holds the JSON request and response types of hostd's HTTP
// API (/v1): the one definition shared by the server (host/api) and the Go
// client (client/).
//
// It is a leaf: it imports only the standard library, so that a program
// that imports the client does not build the daemon (its storage engine,
// Wasm runtime or telemetry SDK). Conversions between these types and the
// builtins' own types live in host/api; builtins never import wire.
//
// The field names and encodings here are the API contract (docs/api.md).
//
// # Encoding rules
//
//   - Names are snake_case; optional fields are omitted when empty.
//   - Byte strings ([]byte) are standard base64 (encoding/json's default).
//   - Times are RFC 3339 with nanoseconds, UTC.
//   - Durations are Go duration strings ("30s", "1h30m").
//   - Time ticks (Unix nanoseconds) have their own type, Tick.
//   - Lists are List[T]: {"items": [...], "next_page_token": ""}.
//   - Errors are ErrorResponse: {"error": {"code", "message", "details"}}.
package wire
