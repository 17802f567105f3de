package api

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Invalid UTF-8 is refused, never repaired.
//
// encoding/json replaces every invalid UTF-8 byte and every lone UTF-16
// surrogate escape (\ud800) in a string with U+FFFD, so two different
// idempotency keys, lock keys or property values would decode to the same
// string and collide. DecodeJSON therefore checks the raw body with
// invalidJSONString before decoding, and the server checks path and query
// parameters (invalidParam) before the handler runs; either way the answer
// is 400 invalid_argument naming the field (details.field, e.g.
// "items[1].key").

// maxCheckDepth bounds the nesting invalidJSONString follows; deeper
// documents are left to encoding/json, which refuses them (its limit is
// 10000).
const maxCheckDepth = 10000

// invalidJSONString returns the path of the first string in the JSON text
// b (a value, or an object key: then the path of its object) that is not
// valid UTF-8 or holds a lone surrogate escape, and bad=true. The path is
// field names joined by "." and array indexes in brackets ("items[1].key");
// a bad top-level string is "body". Malformed JSON is not reported here:
// bad=false and the decoder names the syntax error.
func invalidJSONString(b []byte) (field string, key, bad bool) {
	sc := jsonScanner{b: b}
	sc.skipSpace()
	if sc.value(0) == scanBad {
		return sc.fieldPath(), sc.badKey, true
	}
	return "", false, false
}

type scanResult int

const (
	scanOK     scanResult = iota
	scanBad               // an invalid string was found
	scanSyntax            // malformed JSON: stop, let the decoder report it
)

type pathElem struct {
	isKey bool
	key   []byte // object member (raw, escapes not decoded) when isKey
	index int    // array element otherwise
}

type jsonScanner struct {
	b      []byte
	i      int
	path   []pathElem
	badKey bool
}

func (s *jsonScanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) value(depth int) scanResult {
	if s.i >= len(s.b) || depth > maxCheckDepth {
		return scanSyntax
	}
	switch s.b[s.i] {
	case '{':
		return s.object(depth)
	case '[':
		return s.array(depth)
	case '"':
		_, r := s.str()
		return r
	}
	// A number or literal: skip to the next delimiter.
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			if s.i == start {
				return scanSyntax
			}
			return scanOK
		}
		s.i++
	}
	return scanOK
}

func (s *jsonScanner) object(depth int) scanResult {
	s.i++ // '{'
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return scanOK
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return scanSyntax
		}
		key, r := s.str()
		if r == scanBad {
			s.badKey = true
			return scanBad
		}
		if r != scanOK {
			return r
		}
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return scanSyntax
		}
		s.i++
		s.skipSpace()
		s.path = append(s.path, pathElem{isKey: true, key: key})
		if r := s.value(depth + 1); r != scanOK {
			return r
		}
		s.path = s.path[:len(s.path)-1]
		s.skipSpace()
		if s.i >= len(s.b) {
			return scanSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.skipSpace()
		case '}':
			s.i++
			return scanOK
		default:
			return scanSyntax
		}
	}
}

func (s *jsonScanner) array(depth int) scanResult {
	s.i++ // '['
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return scanOK
	}
	for n := 0; ; n++ {
		s.path = append(s.path, pathElem{index: n})
		if r := s.value(depth + 1); r != scanOK {
			return r
		}
		s.path = s.path[:len(s.path)-1]
		s.skipSpace()
		if s.i >= len(s.b) {
			return scanSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.skipSpace()
		case ']':
			s.i++
			return scanOK
		default:
			return scanSyntax
		}
	}
}

// str scans the string at s.i (its opening quote) and returns its raw
// content (escapes not decoded).
func (s *jsonScanner) str() ([]byte, scanResult) {
	s.i++ // '"'
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			return raw, scanOK
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return nil, scanSyntax
			}
			if s.b[s.i+1] != 'u' {
				s.i += 2
				continue
			}
			r, ok := hex4(s.b, s.i+2)
			if !ok {
				return nil, scanSyntax
			}
			s.i += 6
			switch {
			case r >= 0xDC00 && r <= 0xDFFF: // low surrogate without a high one
				return nil, scanBad
			case r >= 0xD800 && r <= 0xDBFF: // needs a low surrogate next
				if s.i+1 >= len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return nil, scanBad
				}
				r2, ok := hex4(s.b, s.i+2)
				if !ok {
					return nil, scanSyntax
				}
				if r2 < 0xDC00 || r2 > 0xDFFF {
					return nil, scanBad
				}
				s.i += 6
			}
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, scanBad
			}
			s.i += size
		}
	}
	return nil, scanSyntax
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// fieldPath formats s.path ("items[1].key"; "body" when empty).
func (s *jsonScanner) fieldPath() string {
	if len(s.path) == 0 {
		return "body"
	}
	var sb strings.Builder
	for _, e := range s.path {
		if !e.isKey {
			sb.WriteByte('[')
			sb.WriteString(strconv.Itoa(e.index))
			sb.WriteByte(']')
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		if len(e.key) == 0 {
			sb.WriteString(`""`) // the empty member name
			continue
		}
		sb.Write(e.key) // valid UTF-8: keys were checked before descending
	}
	return sb.String()
}

// routeParams returns the wildcard names of a ServeMux path pattern
// ("/v1/things/{id}/{rest...}" → id, rest).
func routeParams(path string) []string {
	var names []string
	for _, seg := range strings.Split(path, "/") {
		if len(seg) < 3 || seg[0] != '{' || seg[len(seg)-1] != '}' {
			continue
		}
		name := strings.TrimSuffix(seg[1:len(seg)-1], "...")
		if name != "$" {
			names = append(names, name)
		}
	}
	return names
}

// invalidParam checks the path parameters of r (names from the route
// pattern) and its query for invalid UTF-8 (after percent-decoding) and
// returns the 400 to send, or nil.
func invalidParam(r *http.Request, params []string) *Error {
	for _, name := range params {
		if !utf8.ValidString(r.PathValue(name)) {
			return InvalidField(name, "path parameter %s is not valid UTF-8", name)
		}
	}
	raw := r.URL.RawQuery
	if raw == "" || (!strings.Contains(raw, "%") && utf8.ValidString(raw)) {
		return nil // nothing percent-encoded: valid as it stands
	}
	var bad []string
	for k, vs := range r.URL.Query() {
		if !utf8.ValidString(k) {
			return BadRequest("a query parameter name is not valid UTF-8").With("field", "query")
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				bad = append(bad, k)
				break
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return InvalidField(bad[0], "query parameter %s is not valid UTF-8", bad[0])
}
