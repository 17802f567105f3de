// Package docs embeds the API reference, openapi.json (OpenAPI 3.1), so
// that the daemon serves the document it was built with (GET
// /v1/openapi.json, `hostd api spec`) and tests can hold the code to it
// (internal/apispec). The other files of this directory are the guides.
package docs

import _ "embed"

// OpenAPI is docs/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
