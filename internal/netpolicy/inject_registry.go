package netpolicy

import (
	"maps"
	"slices"
)

// InjectEvent is what OnInjected is told of a request the gateway
// terminated for an injection rule. It never holds a secret's value.
type InjectEvent struct {
	// Rule is the index of the rule in the policy's inject list (-1 when
	// the request was refused before a rule was chosen); Host, Header
	// and the rule's secret names identify it.
	Rule    int      `json:"rule"`
	Host    string   `json:"host"`
	Header  string   `json:"header,omitempty"`
	Secrets []string `json:"secrets,omitempty"`
	// Destination and Port are the request's (its SNI).
	Destination string `json:"destination"`
	Port        int    `json:"port"`
	// Status is the upstream's answer, or the gateway's own (403, 502).
	Status int `json:"status"`
	// Error says why the gateway failed the request; empty when it went
	// through. Failures are reported each time.
	Error string `json:"error,omitempty"`
}

type injectKey struct {
	destKey
	rule int
}

// SetInjection gives a sandbox its injection rules, secrets and CA (nil:
// no injection). The gateway uses them for new connections.
func (r *Registry) SetInjection(sandboxID string, in *Injection, ca *SandboxCA) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.byID[sandboxID]; sb != nil {
		sb.inject, sb.ca = in, ca
	}
}

// SetInjectRules replaces a sandbox's injection rules, keeping the
// secrets and CA it was given.
func (r *Registry) SetInjectRules(sandboxID string, rules []InjectRule) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.byID[sandboxID]
	if sb == nil {
		return
	}
	in := &Injection{Rules: slices.Clone(rules)}
	if sb.inject != nil {
		in.Secrets, in.Placeholders = sb.inject.Secrets, sb.inject.Placeholders
	}
	sb.inject = in
}

// SetInjectSecrets replaces the values of the secrets a sandbox's rules
// name, and its placeholders for them, keeping its rules and CA: a
// secret named by a rule added since the sandbox started, or changed
// since, is used from the next request on.
func (r *Registry) SetInjectSecrets(sandboxID string, secrets, placeholders map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.byID[sandboxID]
	if sb == nil {
		return
	}
	in := &Injection{Secrets: maps.Clone(secrets), Placeholders: maps.Clone(placeholders)}
	if sb.inject != nil {
		in.Rules = sb.inject.Rules
	}
	sb.inject = in
}

// SetCA gives a running sandbox the gateway CA a rule added since it
// started needs; one it has is kept.
func (r *Registry) SetCA(sandboxID string, ca *SandboxCA) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.byID[sandboxID]; sb != nil && sb.ca == nil {
		sb.ca = ca
	}
}

// CA returns the sandbox's gateway CA, nil when it has none.
func (r *Registry) CA(sandboxID string) *SandboxCA {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.byID[sandboxID]; sb != nil {
		return sb.ca
	}
	return nil
}

// injected counts a request terminated for injection under the
// observation k (its status) and reports it, rate-limited for those that
// went through.
func (r *Registry) injected(sb *sandbox, k obsKey, e InjectEvent, counted bool) {
	now := r.cfg.Now()
	r.mu.Lock()
	if o := sb.obs[k]; o != nil {
		if counted {
			o.Injected++
		}
		o.LastStatus = e.Status
		o.LastSeen = now
		po := r.pendingLocked(sb, k, now)
		if counted {
			po.Injected++
		}
		po.LastStatus = e.Status
	}
	notify := r.cfg.OnInjected != nil && r.byID[sb.id] == sb
	if notify && e.Error == "" {
		ik := injectKey{destKey{e.Destination, e.Port}, e.Rule}
		last, seen := sb.lastInjected[ik]
		if seen && now.Sub(last) < r.cfg.InjectedEvery {
			notify = false
		} else {
			sb.lastInjected[ik] = now
			if len(sb.lastInjected) > 4*MaxInjectRules {
				for k, t := range sb.lastInjected {
					if now.Sub(t) >= r.cfg.InjectedEvery {
						delete(sb.lastInjected, k)
					}
				}
			}
		}
	}
	r.mu.Unlock()
	if notify {
		r.cfg.OnInjected(sb.id, e)
	}
}
