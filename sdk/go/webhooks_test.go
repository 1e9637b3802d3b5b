package cove

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestVerifyWebhook uses the example of the Standard Webhooks
// specification, with its timestamp moved to now and the signature made
// again by hand where needed.
func TestVerifyWebhook(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	spec := http.Header{}
	spec.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	spec.Set("webhook-timestamp", "1614265330")
	spec.Set("webhook-signature", "v1,bm9ldHUjKzFob2xhIHF1ZSB0YWwgZXN0YXM= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	old := time.Since(time.Unix(1614265330, 0))
	if err := VerifyWebhook(secret, spec, body, old+time.Hour); err != nil {
		t.Fatalf("the spec's example: %v", err)
	}
	if err := VerifyWebhook(secret, spec, body, 5*time.Minute); err == nil {
		t.Fatal("an old timestamp passed")
	}
	if err := VerifyWebhook(secret, spec, []byte(`{"test": 1}`), old+time.Hour); err == nil {
		t.Fatal("another body passed")
	}
	if err := VerifyWebhook("whsec_"+"AAAA", spec, body, old+time.Hour); err == nil {
		t.Fatal("another secret passed")
	}
	h := spec.Clone()
	h.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
	if err := VerifyWebhook(secret, h, body, time.Hour); err == nil {
		t.Fatal("a signature of another timestamp passed")
	}
}
