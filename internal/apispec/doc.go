// Package apispec holds hostd's HTTP API to its reference,
// docs/openapi.json (OpenAPI 3.1, embedded by package docs). It is used by
// tests only; the daemon serves the document without parsing it.
//
// What it checks:
//
//   - Spec.Check validates one exchange (request and answer) against the
//     operation it is for, with kin-openapi's request and response
//     validators (JSON Schema 2020-12): the status must be declared, the
//     body must match its schema (additionalProperties false: a field the
//     spec does not name is drift), an error's code must be one of the
//     response's x-hostd-codes, no integer in an answer may exceed 2^53-1,
//     and a request the spec calls invalid must not be answered 2xx.
//   - Spec.Handler wraps an http.Handler to Check every exchange it
//     serves and report drift to a *testing.T. host's tests wrap the
//     daemon's API with it (host.Options.WrapAPI), host/api's tests their
//     servers (api.Options.Wrap), so every API test is also a contract
//     test.
//
// The spec's own extensions: every operation has x-hostd-route (the
// ServeMux pattern host/api registers, which is also how requests are
// matched to operations, so {key...} behaves as on the server),
// x-hostd-role (public, read, write, admin) and, for list routes,
// x-hostd-paginated; every error response has x-hostd-codes. host's
// TestRoutesMatchSpec compares the router's routes and roles with them,
// and TestSchemasMatchWire here compares the schemas with package wire.
package apispec
