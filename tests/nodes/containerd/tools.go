//go:build tools

// Package tools records the main packages this module builds, so `go mod tidy`
// keeps their dependencies in go.sum.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
