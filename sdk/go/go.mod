module github.com/cove-dev/cove/sdk/go

go 1.24

require (
	github.com/coder/websocket v1.8.15
	github.com/cove-dev/cove/api v0.1.0
	github.com/google/go-cmp v0.7.0
)
