// Package config is hostd's configuration: one Config struct with a section
// per subsystem, its defaults, its validation and its loader.
//
// # Sources and precedence
//
// Load layers, lowest to highest priority:
//
//  1. the defaults (Default), documented on every field and in docs/config.md;
//  2. a YAML file (optional);
//  3. HOSTD_* environment variables: the key path with nested keys joined by
//     "__" and upper-cased, so api.listen is HOSTD_API__LISTEN and
//     data.sync_writes is HOSTD_DATA__SYNC_WRITES (a single "_" stays part
//     of a key name). Variables without "__" (HOSTD_ADDR, HOSTD_TOKEN, …)
//     belong to the CLI, not to the daemon config, and are ignored here;
//  4. command-line flags, passed in as key-path overrides (Source.Flags).
//
// Unknown keys are errors (with a "did you mean" hint), wherever they come
// from. Load returns a *ValidationError listing every problem at once, each
// with its key path; Validate does the same for a Config built in code.
//
// # Adding options
//
// Each section lives in its own file (api.go, data.go, log.go, telemetry.go,
// plugins.go, broadcast.go, locks.go, mapping.go) with three parts: the
// struct with `koanf` tags and a doc comment per field giving its default,
// a defaultX() constructor called by Default, and a validate method that
// reports problems through a *problems collector with full key paths.
// Document every new option in docs/config.md and examples/hostd.yaml.
//
// This package is the only importer of koanf in hostd.
package config
