module github.com/cove-dev/cove/sdk/go

go 1.24

require (
	github.com/coder/websocket v1.8.15
	github.com/cove-dev/cove/api v0.0.0
	github.com/google/go-cmp v0.7.0
)

replace github.com/cove-dev/cove/api => ../../api
