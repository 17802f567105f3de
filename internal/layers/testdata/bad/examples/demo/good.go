// Package demo is an example that drives hostd from outside: edges may
// import public packages.
package demo

import _ "example.com/bad/runtime/catalog"
