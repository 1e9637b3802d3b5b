// Package deploytest holds the tests of what installs cove: the systemd
// units in deploy/systemd and the Helm chart in deploy/helm/cove. It is a
// package of its own so that Helm's engine, which only these tests need,
// is built for them alone.
package deploytest
