package s3server

import (
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestStartStop: the server answers with its bucket on loopback, and is
// gone (its port closed) once the test that started it ends.
func TestStartStop(t *testing.T) {
	var addr string
	t.Run("start", func(t *testing.T) {
		s := Start(t)
		if !strings.HasPrefix(s.Endpoint, "http://127.0.0.1:") {
			t.Errorf("endpoint %s is not on loopback", s.Endpoint)
		}
		addr = strings.TrimPrefix(s.Endpoint, "http://")
		if _, err := s.Client().HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: &s.Bucket}); err != nil {
			t.Fatalf("bucket %s: %v", s.Bucket, err)
		}
		if want := "s3://" + s.Bucket + "/cove?endpoint=" + s.Endpoint; s.URL() != want {
			t.Errorf("URL %s, want %s", s.URL(), want)
		}
	})
	if addr == "" {
		return // skipped: no binary
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("versitygw still answers on %s after its test ended", addr)
	}
}

// tb records how Start ended a test.
type tb struct {
	testing.TB
	failed, skipped bool
}

func (r *tb) Helper()               {}
func (r *tb) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *tb) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *tb) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }

// TestMissingBinary: without versitygw a test is skipped, and fails when
// COVE_REQUIRE_S3=1.
func TestMissingBinary(t *testing.T) {
	t.Setenv("COVE_VERSITYGW", "/nonexistent/versitygw")
	for _, require := range []string{"", "1"} {
		t.Setenv("COVE_REQUIRE_S3", require)
		r := &tb{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Start(r)
		}()
		<-done
		if want := require == "1"; r.failed != want || r.skipped == want {
			t.Errorf("COVE_REQUIRE_S3=%q: failed %v, skipped %v", require, r.failed, r.skipped)
		}
	}
}
