// Package webhooks delivers a team's events to its webhook endpoints: the
// outbox the store fills with each event is sent as signed POSTs (Standard
// Webhooks), retried with exponential backoff for a bounded time, by one
// dispatcher with bounded concurrency, never to private addresses unless
// the operator allows them. Its Service keeps the teams' webhooks (create
// with a signing secret sealed at rest, list, delete, deliveries) over the
// store subset it declares (Hooks).
package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// SecretPrefix starts every signing secret, as in Standard Webhooks.
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret: whsec_ and 32 random bytes in
// base64.
func NewSecret() string {
	var b [32]byte
	rand.Read(b[:]) // never fails
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// secretKey is the HMAC key of a secret: the bytes its base64 encodes.
func secretKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("webhook secret is not %s<base64>: %w", SecretPrefix, err)
	}
	return key, nil
}

// Sign returns the webhook-signature header of a message:
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>".
func Sign(secret, msgID string, timestamp int64, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
