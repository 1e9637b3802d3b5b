// Package telemetry is what operators scrape: cove's Prometheus metrics,
// on a registry of its own (client_golang), fed by the control plane
// (events and exec latency), the API (requests by route and code), the
// gateway (bytes and decisions), the webhook dispatcher and the store.
package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cove-dev/cove/api"
)

// Metrics holds every metric of `cove serve`. It is safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry
	log *slog.Logger

	createSeconds    *prometheus.HistogramVec
	wakeSeconds      *prometheus.HistogramVec
	execSeconds      prometheus.Histogram
	commandsStarted  prometheus.Counter
	commandsEnded    *prometheus.CounterVec
	requests         *prometheus.CounterVec
	requestSeconds   *prometheus.HistogramVec
	gatewayBytes     *prometheus.CounterVec
	gatewayDecisions *prometheus.CounterVec
	webhookAttempts  *prometheus.CounterVec
	webhookSeconds   prometheus.Histogram
	storeSeconds     *prometheus.HistogramVec
	storeInFlight    prometheus.Gauge
	requestsInFlight prometheus.Gauge

	mu sync.Mutex
	// since holds when each sandbox began its current start or wake, by
	// ID, until it runs or stops; bounded by maxPending.
	since map[string]pending
}

type pending struct {
	start time.Time
	wake  bool
}

// maxPending bounds the starts and wakes timed at once.
const maxPending = 100000

// SandboxCounter counts live sandboxes by state, for each scrape.
type SandboxCounter func(ctx context.Context) (map[api.SandboxState]int, error)

// latency buckets from 5 ms to about 5 minutes.
var slowBuckets = prometheus.ExponentialBuckets(0.005, 2.5, 13)

// New registers cove's metrics (and the Go runtime's and the process's)
// on a registry of their own. counter is asked at each scrape.
func New(counter SandboxCounter, log *slog.Logger) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), log: log, since: map[string]pending{}}
	m.createSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cove_sandbox_create_seconds", Help: "Time from a sandbox's creation to running (outcome running) or failed.", Buckets: slowBuckets,
	}, []string{"outcome"})
	m.wakeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cove_sandbox_wake_seconds", Help: "Time from waking to running (outcome running) or back to asleep or failed.", Buckets: slowBuckets,
	}, []string{"outcome"})
	m.execSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cove_command_exec_seconds", Help: "Time to start a command (POST …/commands until it runs).", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 13),
	})
	m.commandsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cove_commands_started_total", Help: "Commands started.",
	})
	m.commandsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_commands_ended_total", Help: "Commands ended, by outcome (exited, killed, timed_out, lost).",
	}, []string{"outcome"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_api_requests_total", Help: "API requests by route pattern and status code.",
	}, []string{"route", "code"})
	m.requestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cove_api_request_seconds", Help: "API request durations by route pattern (streams last as long as they are followed).", Buckets: prometheus.DefBuckets,
	}, []string{"route"})
	m.gatewayBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_gateway_bytes_total", Help: "Bytes the egress gateway moved: out (from sandboxes) and in (to them).",
	}, []string{"direction"})
	m.gatewayDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_gateway_decisions_total", Help: "Connections and queries the sandboxes' network decided, allowed or denied.",
	}, []string{"decision"})
	m.webhookAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_webhook_attempts_total", Help: "Webhook delivery attempts by outcome: delivered, retry (failed, tried again), failed (given up).",
	}, []string{"outcome"})
	m.webhookSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cove_webhook_attempt_seconds", Help: "Webhook delivery attempt latencies.", Buckets: prometheus.DefBuckets,
	})
	m.storeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cove_store_seconds", Help: "Store call latencies by operation.", Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12),
	}, []string{"op"})
	m.storeInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cove_store_ops_in_flight", Help: "Timed store calls this replica has waiting or running (queued for a connection under load).",
	})
	m.requestsInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cove_api_requests_in_flight", Help: "API requests this replica is serving, streams included.",
	})
	m.reg.MustRegister(
		m.storeInFlight, m.requestsInFlight,
		m.createSeconds, m.wakeSeconds, m.execSeconds, m.commandsStarted, m.commandsEnded,
		m.requests, m.requestSeconds, m.gatewayBytes, m.gatewayDecisions,
		m.webhookAttempts, m.webhookSeconds, m.storeSeconds,
		&sandboxCollector{count: counter, log: log},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, o := range []string{"exited", "killed", "timed_out", "lost"} {
		m.commandsEnded.WithLabelValues(o)
	}
	for _, o := range []string{"delivered", "retry", "failed"} {
		m.webhookAttempts.WithLabelValues(o)
	}
	for _, d := range []string{"out", "in"} {
		m.gatewayBytes.WithLabelValues(d)
	}
	for _, d := range []string{"allowed", "denied"} {
		m.gatewayDecisions.WithLabelValues(d)
	}
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slogErrors{m.log}})
}

type slogErrors struct{ log *slog.Logger }

func (l slogErrors) Println(v ...any) { l.log.Warn("metrics", "err", v) }

// liveStates are the states counted by cove_sandboxes: terminal ones grow
// without bound and are left out.
var liveStates = []api.SandboxState{api.StateCreating, api.StateSettingUp, api.StateRunning, api.StateSleeping,
	api.StateAsleep, api.StateWaking, api.StateTerminating}

var sandboxesDesc = prometheus.NewDesc("cove_sandboxes", "Sandboxes by state (terminated and failed ones are not counted).", []string{"state"}, nil)

type sandboxCollector struct {
	count SandboxCounter
	log   *slog.Logger
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	if c.count == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, err)
		return
	}
	for _, s := range liveStates {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n[s]), string(s))
	}
}

// Event is told every event the control plane appends: commands started
// and ended, and the transitions that start and end a create or a wake.
func (m *Metrics) Event(e api.Event) {
	switch e.Type {
	case "command.started":
		m.commandsStarted.Inc()
	case "command.exited":
		outcome, _ := e.Data["state"].(api.CommandState)
		if outcome == "" {
			s, _ := e.Data["state"].(string)
			outcome = api.CommandState(s)
		}
		m.commandsEnded.WithLabelValues(string(outcome)).Inc()
	case "sandbox.creating", "sandbox.waking":
		m.mu.Lock()
		if len(m.since) < maxPending {
			m.since[e.SandboxID] = pending{time.Now(), e.Type == "sandbox.waking"}
		}
		m.mu.Unlock()
	case "sandbox.running", "sandbox.failed", "sandbox.asleep", "sandbox.terminating", "sandbox.terminated":
		m.mu.Lock()
		p, ok := m.since[e.SandboxID]
		delete(m.since, e.SandboxID)
		m.mu.Unlock()
		if !ok {
			return
		}
		d := time.Since(p.start).Seconds()
		outcome := e.Type[len("sandbox."):]
		// A wake ends in running, asleep (it failed, the save is kept)
		// or failed; a create in running or failed (or is terminated).
		if p.wake {
			m.wakeSeconds.WithLabelValues(outcome).Observe(d)
		} else {
			m.createSeconds.WithLabelValues(outcome).Observe(d)
		}
	}
}

// Exec is told how long a command took to start.
func (m *Metrics) Exec(d time.Duration) { m.execSeconds.Observe(d.Seconds()) }

// WebhookAttempt counts a webhook delivery attempt (webhooks.Observer).
func (m *Metrics) WebhookAttempt(outcome string, latency time.Duration) {
	m.webhookAttempts.WithLabelValues(outcome).Inc()
	m.webhookSeconds.Observe(latency.Seconds())
}

// GatewayDecision counts one decision of the sandboxes' network
// (netpolicy.Counters).
func (m *Metrics) GatewayDecision(decision string) {
	m.gatewayDecisions.WithLabelValues(decision).Inc()
}

// GatewayBytes counts bytes the gateway moved (netpolicy.Counters).
func (m *Metrics) GatewayBytes(out, in int64) {
	if out > 0 {
		m.gatewayBytes.WithLabelValues("out").Add(float64(out))
	}
	if in > 0 {
		m.gatewayBytes.WithLabelValues("in").Add(float64(in))
	}
}

// beginStore counts a store call in flight and returns its start, for
// observeStore.
func (m *Metrics) beginStore() time.Time {
	m.storeInFlight.Inc()
	return time.Now()
}

func (m *Metrics) observeStore(op string, start time.Time) {
	m.storeInFlight.Dec()
	m.storeSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
}
