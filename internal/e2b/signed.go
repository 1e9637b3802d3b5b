package e2b

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strconv"

	"golang.org/x/time/rate"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// Signed file URLs. E2B's SDKs make download and upload URLs that a
// browser fetches with no header at all: E2B_SANDBOX_URL/files with path,
// username, signature and signature_expiration (Signature). Such a URL
// does not name its sandbox, and its signature is a hash over the
// sandbox's token, which is not stored anywhere (Tokens derives it). So
// the listener tries the running sandboxes made through E2B, across
// teams: for each, it derives the token and the signature the URL would
// have, and compares in constant time. A match lets the request in as
// that sandbox's, for that one operation (read for GET, write for POST),
// path and user, all of which the hash covers.
//
// The cost is two hashes per candidate (an HMAC for the token, a SHA-256
// for the signature), 2.5 µs on one core of our build machine
// (BenchmarkSignedCandidate), plus reading the running sandboxes from the
// store, signedPage at a time, at most maxSignedCandidates of them: about
// 50 ms of hashing at the bound.
// An expired URL is refused before any of it. A request that carries
// E2b-Sandbox-Id checks that sandbox only.
//
// Anyone can send a signed URL, so the searches of all requests together
// draw on one budget of candidates (signedBudget a second, a bound's worth
// in reserve): about a quarter of one core at most. A search the budget
// cannot pay for is refused with 429 and Retry-After, before it hashes
// anything more.

// SandboxStore is what the search reads of the store (store.Store):
// sandboxes of any team, for the listener's own lookup, never answered as
// such to a request.
type SandboxStore interface {
	GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error)
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]api.Sandbox, error)
}

var _ SandboxStore = store.Store(nil)

// Bounds of the search.
const (
	// signedPage is how many running sandboxes one store query reads.
	signedPage = 1000
	// maxSignedCandidates is how many running sandboxes a signed URL is
	// tried against at most.
	maxSignedCandidates = 20 * signedPage
	// signedBudget is how many candidates all searches together try per
	// second; the budget holds maxSignedCandidates at most.
	signedBudget = 100_000
)

// newSignedBudget is the budget of one listener.
func newSignedBudget() *rate.Limiter { return rate.NewLimiter(signedBudget, maxSignedCandidates) }

// errSearchBudget refuses a search past the budget.
var errSearchBudget = api.Errorf(api.CodeResourceExhausted, "too many signed URL requests to search for their sandboxes; retry in a second, or send E2b-Sandbox-Id")

// errExpired is E2B's answer to an expired signature, word for word.
var errExpired = api.Errorf(api.CodeUnauthenticated, "signature is already expired")

// serveSigned lets a request with a signature in: only GET and POST
// /files, only as the sandbox whose token made the signature.
func (s *SandboxSide) serveSigned(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.signedTarget(r, id)
	if err == errSearchBudget {
		w.Header().Set("Retry-After", "1")
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

func (s *SandboxSide) signedTarget(r *http.Request, id string) (target, error) {
	var op string
	switch {
	case r.URL.Path != "/files":
		return target{}, api.Errorf(api.CodeUnauthenticated, "a signature opens only /files; send X-Access-Token for %s", r.URL.Path)
	case r.Method == http.MethodGet:
		op = "read"
	case r.Method == http.MethodPost:
		op = "write"
	default:
		return target{}, api.Errorf(api.CodeUnauthenticated, "a signature opens only GET (read) and POST (write) of /files")
	}
	q := r.URL.Query()
	sig, exp := q.Get("signature"), q.Get("signature_expiration")
	if exp != "" {
		at, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return target{}, api.Errorf(api.CodeUnauthenticated, "signature_expiration %q is not a Unix time in seconds", exp)
		}
		if at < s.now().Unix() {
			return target{}, errExpired
		}
	}
	check := func(sb api.Sandbox) bool {
		if _, ok := sb.Labels[labelTemplate]; !ok || sb.State != api.StateRunning {
			return false
		}
		want := Signature(q.Get("path"), op, q.Get("username"), s.tokens.Token(sb.TeamID, sb.ID), exp)
		return subtle.ConstantTimeCompare([]byte(want), []byte(sig)) == 1
	}
	refused := api.Errorf(api.CodeUnauthenticated, "the signature does not match this path, operation (%s) and user of any running sandbox", op)
	if id != "" {
		sb, err := s.store.GetSandbox(r.Context(), "", id)
		if api.ErrorCode(err) == api.CodeNotFound || (err == nil && !check(sb)) {
			return target{}, refused
		} else if err != nil {
			return target{}, err
		}
		return target{TeamID: sb.TeamID, SandboxID: sb.ID}, nil
	}
	f := store.SandboxFilter{States: []api.SandboxState{api.StateRunning}, Limit: signedPage}
	for tried := 0; tried < maxSignedCandidates; {
		page, err := s.store.ListSandboxes(r.Context(), f)
		if err != nil {
			return target{}, err
		}
		if !s.searches.AllowN(s.now(), len(page)) {
			return target{}, errSearchBudget
		}
		for _, sb := range page {
			if check(sb) {
				return target{TeamID: sb.TeamID, SandboxID: sb.ID}, nil
			}
		}
		tried += len(page)
		if len(page) < signedPage {
			break
		}
		f.After = page[len(page)-1].ID
	}
	return target{}, refused
}
