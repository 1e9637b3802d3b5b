module github.com/cove-dev/cove/sdk/go

go 1.24.0

require (
	github.com/coder/websocket v1.8.15
	github.com/cove-dev/cove/api v0.1.0
	github.com/go-git/go-git/v5 v5.17.2
	github.com/google/go-cmp v0.7.0
	github.com/segmentio/asm v1.2.1
)

require (
	github.com/go-git/gcfg v1.5.1-0.20230307220236-3a3c6141e376 // indirect
	github.com/go-git/go-billy/v5 v5.8.0 // indirect
	github.com/jbenet/go-context v0.0.0-20150711004518-d14ea06fba99 // indirect
	golang.org/x/net v0.47.0 // indirect
	golang.org/x/sys v0.38.0 // indirect
	gopkg.in/warnings.v0 v0.1.2 // indirect
)

