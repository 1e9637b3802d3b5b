package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

// received is one POST a receiver got, as it came.
type received struct {
	ID, Timestamp, Signature string
	Body                     []byte
	Status                   int       // what the receiver answered
	At                       time.Time // when it came
}

// payload is what a delivery's body holds.
type payload struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      api.Event `json:"data"`
}

// receiver is a webhook endpoint on loopback. answer picks the status of
// the n-th request (from 1); nil answers 204.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	answer func(n int) int
	got    []received
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	r := &receiver{answer: answer}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		status := http.StatusNoContent
		if r.answer != nil {
			status = r.answer(len(r.got) + 1)
		}
		r.got = append(r.got, received{
			ID: req.Header.Get("webhook-id"), Timestamp: req.Header.Get("webhook-timestamp"),
			Signature: req.Header.Get("webhook-signature"), Body: body, Status: status, At: time.Now(),
		})
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) setAnswer(answer func(n int) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = answer
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// waitFor polls the receiver until cond holds of what it got.
func (r *receiver) waitFor(t *testing.T, what string, cond func([]received) bool) []received {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := r.requests()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver never got %s; it got %d requests: %s", what, len(got), summary(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func summary(got []received) string {
	var b strings.Builder
	for _, g := range got {
		fmt.Fprintf(&b, "\n  %s %d %.200s", g.ID, g.Status, g.Body)
	}
	return b.String()
}

// verify checks a request as a receiver following the Standard Webhooks
// specification would, with plain crypto/hmac (none of cove's code): the
// key is the secret's base64 after "whsec_"; the signed content is
// "id.timestamp.body"; the header lists space-separated "v1,<base64>"
// signatures, any of which may match. It also checks the timestamp is
// within five minutes of now.
func verify(secret string, r received) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return fmt.Errorf("secret %q is not whsec_<base64>", secret)
	}
	if r.ID == "" {
		return fmt.Errorf("no webhook-id")
	}
	ts, err := strconv.ParseInt(r.Timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: %v", r.Timestamp, err)
	}
	if d := time.Since(time.Unix(ts, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %d is %v away from now", ts, d)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.ID + "." + r.Timestamp + "."))
	mac.Write(r.Body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(r.Signature) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no v1 signature of %q matches", r.Signature)
}

func decodePayload(t *testing.T, r received) payload {
	t.Helper()
	var p payload
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("delivery body %q: %v", r.Body, err)
	}
	return p
}
