//go:build tools

// Package tools records the runc main package so `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/opencontainers/runc"
