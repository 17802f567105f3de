// Package client is the Go client of hostd's HTTP API; the hostd CLI uses
// it. Each feature adds typed methods in client/<feature>.go on top of Do.
//
//	c, err := client.New("http://127.0.0.1:7070", client.WithToken(tok))
//	var v client.Version
//	err = c.Do(ctx, "GET", "/v1/version", nil, &v)
//
// Every API error comes back as a *Error carrying the API's stable code;
// match with errors.As or the helpers IsNotFound, IsConflict, ...
package client
