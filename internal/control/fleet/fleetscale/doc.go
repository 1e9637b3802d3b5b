// Package fleetscale measures the control plane's side of a fleet at
// scale, in its tests: fake nodes that serve the real node API over an
// in-memory node and join through the real join protocol over loopback
// mTLS, and one or two control replicas (fleets over one store) placing
// sandboxes on them. TestControlScale runs it small in `make test`;
// BenchmarkControlScale runs the full size in `make bench`.
package fleetscale
