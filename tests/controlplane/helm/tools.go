//go:build tools

// Package tools records the helm main package so `go mod tidy` keeps its dependencies.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
