package httpapi

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// ReadyCheck is one check of GET /readyz: nil when what it checks is
// ready. detail, when not empty, is reported beside the result whether it
// passes or not (a template still building, say).
type ReadyCheck func(ctx context.Context) (detail string, err error)

// readyTimeout bounds each check of GET /readyz: the answer comes in time
// even when the store or runc hangs, and a check that runs out fails.
const readyTimeout = 5 * time.Second

// readyCheck is one check's entry in GET /readyz's answer.
type readyCheck struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

// readyAnswer is GET /readyz's answer: ready when every check is ok;
// failing names the checks that are not, sorted.
type readyAnswer struct {
	Ready   bool                  `json:"ready"`
	Failing []string              `json:"failing,omitempty"`
	Checks  map[string]readyCheck `json:"checks"`
}

// serveReady answers GET /readyz: every check runs at once, each within
// readyTimeout; 200 when all pass, 503 naming those that fail.
func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	ans := readyAnswer{Ready: true, Checks: map[string]readyCheck{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, check := range h.Ready {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			detail, err := check(ctx)
			c := readyCheck{OK: err == nil, Detail: detail}
			if err != nil {
				c.Error = strings.TrimSpace(err.Error())
			}
			mu.Lock()
			ans.Checks[name] = c
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, name := range slices.Sorted(maps.Keys(ans.Checks)) {
		if !ans.Checks[name].OK {
			ans.Ready = false
			ans.Failing = append(ans.Failing, name)
		}
	}
	status := http.StatusOK
	if !ans.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, ans)
}
