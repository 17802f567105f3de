package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hostd-dev/hostd/host/api"
)

// A feature registers its routes with a role; handlers return errors and
// the server writes them in the one error shape.
func ExampleServer_Handle() {
	s, err := api.New(api.Options{Listen: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	type greetRequest struct {
		Name string `json:"name"`
	}
	s.Handle("POST /v1/greetings", api.RoleWrite, func(w http.ResponseWriter, r *http.Request) error {
		var req greetRequest
		if err := api.DecodeJSON(r, &req); err != nil {
			return err
		}
		if req.Name == "" {
			return api.InvalidField("name", "name is required")
		}
		return api.WriteJSON(w, http.StatusCreated, map[string]string{"greeting": "hello " + req.Name})
	})
	if err := s.Start(); err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	for _, body := range []string{`{"name":"ops"}`, `{}`, `{"nmae":"x"}`} {
		res, err := http.Post(s.URL()+"/v1/greetings", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Print(res.StatusCode, " ", string(b))
	}
	http.DefaultClient.CloseIdleConnections()
	// Output:
	// 201 {"greeting":"hello ops"}
	// 400 {"error":{"code":"invalid_argument","message":"name is required","details":{"field":"name"}}}
	// 400 {"error":{"code":"invalid_argument","message":"unknown field \"nmae\"","details":{"field":"nmae"}}}
}
