package e2etest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Running is the first replica of the control plane whose process runs,
// nil when none does.
func (f *Fleet) Running() *Server {
	for _, c := range f.Controls {
		if c.PID() != 0 {
			return c
		}
	}
	return nil
}

// Other is a running replica other than c, nil when there is none.
func (f *Fleet) Other(c *Server) *Server {
	for _, o := range f.Controls {
		if o != c && o.PID() != 0 {
			return o
		}
	}
	return nil
}

// Health is what a server answers on GET /healthz; the fields the
// replicas' tests read.
type Health struct {
	Status string `json:"status"`
	// Store is "ok" or the error of the server's last use of its store.
	Store string `json:"store"`
	// Leader is whether this replica holds the lease of the singletons.
	Leader bool `json:"leader"`
}

// Health asks the server's /healthz, with a short timeout: a replica that
// does not answer (killed, or stopped) is an error.
func (s *Server) Health() (Health, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/healthz", nil)
	if err != nil {
		return Health{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Health{}, err
	}
	defer resp.Body.Close()
	var h Health
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("GET /healthz: %s", resp.Status)
	}
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// Leaders are the running replicas that say they lead.
func (f *Fleet) Leaders() []*Server {
	var ls []*Server
	for _, c := range f.Controls {
		if c.PID() == 0 {
			continue
		}
		if h, err := c.Health(); err == nil && h.Leader {
			ls = append(ls, c)
		}
	}
	return ls
}

// WaitLeader waits until exactly one running replica says it leads, and
// returns it and how long the wait took. It fails the test after within.
func (f *Fleet) WaitLeader(within time.Duration) (*Server, time.Duration) {
	f.t.Helper()
	start := time.Now()
	var last []*Server
	for time.Since(start) < within {
		if last = f.Leaders(); len(last) == 1 {
			return last[0], time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("no single leader among the replicas after %v: %d lead", within, len(last))
	return nil, 0
}

// Kill ends a replica as a crash would (SIGKILL) and waits for its end.
func (f *Fleet) Kill(c *Server) { c.Stop(syscall.SIGKILL) }

// Replica is the replica whose API is at url.
func (f *Fleet) Replica(t testing.TB, url string) *Server {
	for _, c := range f.Controls {
		if c.URL == url {
			return c
		}
	}
	t.Fatalf("no replica at %s", url)
	return nil
}
