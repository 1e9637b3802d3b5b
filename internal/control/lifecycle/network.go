package lifecycle

import (
	"context"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
)

// checkPolicy validates a list of network grants and returns it (never
// nil).
func checkPolicy(field string, allow []string) ([]string, error) {
	if len(allow) > 256 {
		return nil, invalid("%s has %d entries; at most 256 are allowed", field, len(allow))
	}
	if _, err := netpolicy.Parse(allow); err != nil {
		return nil, invalid("%s: %v", field, err)
	}
	if allow == nil {
		allow = []string{}
	}
	return allow, nil
}

// checkInject validates a policy's injection rules and returns them in
// canonical form (nil stays nil: a PATCH keeps the rules).
func checkInject(field string, rules []api.InjectRule) ([]api.InjectRule, error) {
	if rules == nil {
		return nil, nil
	}
	checked, err := netpolicy.CheckInject(InjectRules(rules))
	if err != nil {
		return nil, invalid("%s: %v", field, err)
	}
	out := make([]api.InjectRule, len(checked))
	for i, r := range checked {
		out[i] = api.InjectRule{Host: r.Host, Port: r.Port, PathPrefix: r.PathPrefix, Header: r.Header, Value: r.Value}
	}
	return out, nil
}

// placeholders are the variables of refs that hold placeholders, sorted;
// nil when none.
func placeholders(refs map[string]api.SecretRef) []string {
	var out []string
	for k, r := range refs {
		if r.Placeholder {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// InjectRules converts the API's injection rules to the gateway's.
func InjectRules(rules []api.InjectRule) []netpolicy.InjectRule {
	out := make([]netpolicy.InjectRule, len(rules))
	for i, r := range rules {
		out[i] = netpolicy.InjectRule{Host: r.Host, Port: r.Port, PathPrefix: r.PathPrefix, Header: r.Header, Value: r.Value}
	}
	return out
}

// NetworkDenied records a denial seen by the node's gateway or resolver as
// a network.denied event, naming the command that made the connection when
// the node found it and it is the sandbox's. The node rate-limits calls per
// destination and per sandbox; suppressed counts the sandbox's denials its
// per-sandbox rate held back since its previous call, which go into this
// event.
func (s *Core) NetworkDenied(sandboxID string, o api.NetworkObservation, suppressed int64) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	sb, err := s.store.GetSandbox(ctx, "", sandboxID)
	if err != nil {
		return // a warm sandbox nobody owns yet, or one just removed
	}
	data := map[string]any{"destination": o.Destination, "port": o.Port, "count": o.Count}
	if o.Reason != "" {
		data["reason"] = o.Reason
	}
	if suppressed > 0 {
		data["suppressed"] = suppressed
	}
	cmd := s.svc.Observations.CheckCommand(ctx, sandboxID, o.LastCommandID)
	s.svc.Events.Emit(ctx, sb.TeamID, "network.denied", sandboxID, cmd, data)
}

// NetworkInjected records what the node's gateway reports of requests it
// terminated for an injection rule as a network.injected event: at most
// once a minute per destination and rule for those that went through, and
// every failure (error set). It holds the rule's index, host, header and
// secret names, the destination and the status; never a value.
func (s *Core) NetworkInjected(sandboxID string, e netpolicy.InjectEvent) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	sb, err := s.store.GetSandbox(ctx, "", sandboxID)
	if err != nil {
		return
	}
	data := map[string]any{"rule": e.Rule, "host": e.Host, "destination": e.Destination, "port": e.Port, "status": e.Status}
	if e.Header != "" {
		data["header"] = e.Header
	}
	if len(e.Secrets) > 0 {
		data["secrets"] = e.Secrets
	}
	if e.Error != "" {
		data["error"] = e.Error
	}
	s.svc.Events.Emit(ctx, sb.TeamID, "network.injected", sandboxID, "", data)
}
