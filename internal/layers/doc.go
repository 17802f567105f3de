// Package layers enforces hostd's import rules (docs/architecture.md,
// docs/contributing.md): the folders are the architecture, and a package
// may import only what its layer allows. The rules are data (rules.go);
// the test (layers_test.go) parses every non-test Go file of the module
// with go/parser — all build tags, including the wasip1 guest files — and
// fails naming each forbidden import. Test files are exempt, and so is
// bench/ (its own module).
//
// Like pebble's TestForbiddenImports, the check has a self-test: a
// synthetic module in testdata/bad with one violation of every rule, so the
// test is known to be able to fail.
//
// The same package keeps the repository self-contained (links.go,
// TestNoReferencesOutsideRepo): no file may point at the design folder of
// the workspace the repository was built in, or link outside the
// repository; design decisions belong in docs/design/. It has the same kind
// of self-test (testdata/outside).
package layers
