package layers

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// OutsideRef is a reference in a repository file to something that is not
// in the repository a user clones (e.g. the design folder of the workspace
// the repository was built in, one level above it).
type OutsideRef struct {
	File string // relative to the root, slash-separated
	Line int
	Ref  string
}

func (r OutsideRef) String() string {
	return fmt.Sprintf("%s:%d: %q points outside the repository", r.File, r.Line, r.Ref)
}

var (
	// sharedRef matches a relative path into the workspace that wraps the
	// repository: one or more parent steps, then its shared or seeds
	// folder.
	sharedRef = regexp.MustCompile(`(?:\.\./)+(?:shared|seeds)/[^\s)"'\x60;,]*[^\s)"'\x60;,.]`)
	// mdLink matches the target of a Markdown link or image.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)`)
)

// textExt are the files OutsideRefs reads.
var textExt = map[string]bool{".go": true, ".md": true, ".yaml": true, ".yml": true, ".json": true, ".txt": true, ".sh": true, ".mod": true}

// OutsideRefs lists every reference under root that escapes it: a relative
// path into the wrapping workspace's shared or seeds folder in any text
// file, and a relative Markdown
// link whose target resolves outside root. Directories named testdata
// (fixtures, fuzz corpora) and dot-directories are skipped.
func OutsideRefs(root string) ([]OutsideRef, error) {
	var out []OutsideRef
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !textExt[filepath.Ext(p)] && d.Name() != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for i, line := range bytes.Split(b, []byte("\n")) {
			for _, m := range sharedRef.FindAll(line, -1) {
				out = append(out, OutsideRef{File: rel, Line: i + 1, Ref: string(m)})
			}
			if filepath.Ext(p) != ".md" {
				continue
			}
			for _, m := range mdLink.FindAllSubmatch(line, -1) {
				target := string(m[1])
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "/") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				if j := path.Clean(path.Join(path.Dir(rel), target)); j == ".." || strings.HasPrefix(j, "../") {
					out = append(out, OutsideRef{File: rel, Line: i + 1, Ref: string(m[1])})
				}
			}
		}
		return nil
	})
	return out, err
}
