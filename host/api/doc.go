// Package api is hostd's HTTP/JSON API server: routing, auth, limits,
// timeouts, tracing, metrics, panic recovery and the one error shape.
//
// # Adding routes
//
// A feature adds host/api/<feature>.go with a function that takes the
// Server and the feature's service (through a small interface declared in
// that file) and registers its routes:
//
//	func RegisterLocks(s *api.Server, svc LockService) {
//		s.Handle("POST /v1/locks", api.RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
//			var req acquireRequest
//			if err := api.DecodeJSON(r, &req); err != nil {
//				return err
//			}
//			...
//			return api.WriteJSON(w, http.StatusOK, resp)
//		})
//	}
//
// host/<feature>.go calls it while the Host opens. A handler returns an
// error instead of writing one: an *Error (BadRequest, NotFound, Conflict,
// ...), or the feature's own error translated by an ErrorMapper registered
// with Server.MapErrors; anything else becomes 500 "internal" and is logged.
//
// # What every route gets
//
//   - Auth: bearer tokens with roles read < write < admin (Handle's role
//     argument); 401 unauthenticated without or with an unknown token, 403
//     permission_denied when the role is too weak. Without tokens auth is
//     off, which New allows only on a loopback address. PrincipalFrom
//     returns the caller. Under /v1/ authentication comes before routing:
//     without a valid token an unknown path or method is 401 too, never
//     404/405, so the routes cannot be enumerated.
//   - Limits: request bodies over Options.MaxBodyBytes (4 MiB) fail with 413
//     too_large; the request context has a deadline (30 s; WithTimeout per
//     route, negative for streams).
//   - A SERVER span named after the pattern, child of the caller's W3C
//     traceparent; the http.server.request.duration histogram.
//   - A panic becomes 500 internal with the stack logged; the connection is
//     not dropped.
//   - Input is valid UTF-8 or refused: DecodeJSON checks every body string
//     (values and object keys, lone \u surrogates too) before decoding and
//     the server checks path and query parameters before the handler, each
//     a 400 invalid_argument naming details.field (utf8check.go) — never
//     a silent U+FFFD that would make distinct keys collide.
//   - Errors are capped when written (WriteError): message 1 KiB, string
//     details 256 B, cut values end in TruncatedMark; an invalid_argument
//     without details.field gets "request".
//
// Lists use PageParams / WriteList: query limit (default 100, max 1000) and
// page_token, response {"items": [...], "next_page_token": ""}.
//
// Built-in routes: GET /healthz (liveness, public), GET /readyz (public;
// 503 until Options.Ready reports nothing pending), GET /metrics
// (Prometheus, read), GET /v1/version (read).
package api
