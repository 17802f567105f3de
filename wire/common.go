package wire

// MaxSafeInteger is 2^53-1, the largest integer a JSON number keeps
// exactly in JavaScript (Number.MAX_SAFE_INTEGER) and jq. Every integer in
// an API answer stays at or below it; larger values (time ticks) are sent
// as strings.
const MaxSafeInteger = 1<<53 - 1

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error *Error `json:"error"`
}

// Error is the API's one error shape. Code is stable (clients match on
// it), Message is for humans, Details carries structured context: "field"
// for invalid_argument, limits, holders, ...
type Error struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// List is the answer of every list route. Items is never null;
// NextPageToken is empty on the last page (pass it as ?page_token= to get
// the next one).
type List[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"next_page_token"`
}

// Version is the answer of GET /v1/version.
type Version struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	BuildDate string `json:"build_date,omitempty"`
	GoVersion string `json:"go_version"`
}

// Status is the answer of GET /healthz ("ok") and GET /readyz ("ready").
type Status struct {
	Status string `json:"status"`
}

// ResourceKey is a resource key: mode is "shared" or "exclusive" (the
// default depends on the route: shared for broadcasts).
type ResourceKey struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Mode   string `json:"mode,omitempty"`
}
