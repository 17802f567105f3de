package layers

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestNoReferencesOutsideRepo: no file of the repository points at the
// design pages of the workspace hostd was built in (one level above the
// repository, which a user who clones it does not have) or links outside
// the repository; the design decisions live in docs/design/.
func TestNoReferencesOutsideRepo(t *testing.T) {
	refs, err := OutsideRefs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		t.Errorf("%s", r)
	}
}

// TestOutsideRefsCatches runs the check on a synthetic tree with one
// reference of each kind, so the test above is known to be able to fail.
func TestOutsideRefsCatches(t *testing.T) {
	refs, err := OutsideRefs(filepath.Join("testdata", "outside"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range refs {
		got = append(got, r.String())
	}
	up := ".." + "/" // spelled so that this file does not match itself
	want := []string{
		`docs/guide.md:3: "` + up + `shared/design/tracing.md" points outside the repository`,
		`docs/guide.md:3: "` + up + up + `seeds/000.md" points outside the repository`, // the path
		`docs/guide.md:3: "` + up + up + `seeds/000.md" points outside the repository`, // the link
		`docs/guide.md:4: "` + up + up + `elsewhere.md" points outside the repository`,
		`pkg/doc.go:1: "` + up + up + `shared/design/locks.md" points outside the repository`,
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
