// Package pkg is specified in ../../shared/design/locks.md.
package pkg
