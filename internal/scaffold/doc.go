// Package scaffold creates and builds hostd plugin projects: the code
// behind `hostd plugin new NAME` and `hostd plugin build DIR`.
//
// New writes a self-contained Go module (go.mod, main.go with an ack
// callback and a validator, main_test.go using sdk/sdktest, README.md,
// .gitignore). hostd's module is not published, so the go.mod requires
// github.com/hostd-dev/hostd at a placeholder version and replaces it with
// the path of a local hostd checkout: the one given with --sdk, or the one
// this binary was built from (found from its own source path, which Go
// records unless the binary was built with -trimpath), or a checkout
// enclosing the working directory. The scaffold imports only the SDK,
// which uses the standard library alone, so it builds without go.sum
// entries or network access.
//
// Build runs the documented build line in a plugin directory:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o OUT .
//
// and checks that the result is a WebAssembly module that declares hostd's
// ABI v1 (it exports abi.ExportABIMarker), so that a plugin built without
// the SDK's registration code is caught at build time, not at load time.
package scaffold
