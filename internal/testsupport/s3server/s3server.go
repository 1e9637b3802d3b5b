// Package s3server runs a real S3 server for tests: versitygw over its
// posix backend in the test's temporary directory, on a free loopback
// port, with one bucket, stopped when the test ends.
//
// The binary is $COVE_VERSITYGW, else /var/cache/cove/bin/versitygw
// (scripts/versitygw.sh installs it). Without it a test is skipped, or
// fails when COVE_REQUIRE_S3=1 (as `make test` sets).
package s3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// DefaultBinary is where scripts/versitygw.sh installs versitygw.
const DefaultBinary = "/var/cache/cove/bin/versitygw"

// Server is a running versitygw with one bucket.
type Server struct {
	// Endpoint is its base URL, http://127.0.0.1:PORT.
	Endpoint string
	Bucket   string
	// AccessKey and SecretKey are its root user's credentials.
	AccessKey string
	SecretKey string
	// Dir is the posix backend's directory: the bucket is Dir/Bucket.
	Dir string
}

// URL is the saves URL of the prefix "cove" in the bucket:
// s3://BUCKET/cove?endpoint=ENDPOINT.
func (s *Server) URL() string { return s.PrefixURL("cove") }

// PrefixURL is the saves URL of a prefix in the bucket:
// s3://BUCKET/PREFIX?endpoint=ENDPOINT.
func (s *Server) PrefixURL(prefix string) string {
	return "s3://" + s.Bucket + "/" + strings.Trim(prefix, "/") + "?endpoint=" + s.Endpoint
}

// Env sets the AWS_* variables of the server's credentials for the rest
// of the test (so the test must not be parallel).
func (s *Server) Env(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	t.Setenv("AWS_REGION", "us-east-1")
}

// Client is an S3 client of the server as its root user, for a test to
// look at or tamper with the bucket.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		HTTPClient:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},

		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// Binary is the versitygw the tests use, or "" when there is none.
func Binary() string {
	bin := os.Getenv("COVE_VERSITYGW")
	if bin == "" {
		bin = DefaultBinary
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return ""
	}
	return bin
}

// Start starts a server for the test and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "no versitygw (run scripts/versitygw.sh, or set COVE_VERSITYGW)"
		if os.Getenv("COVE_REQUIRE_S3") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	s := &Server{Bucket: "cove-test-" + randHex(4), AccessKey: "cove" + randHex(8), SecretKey: randHex(20), Dir: filepath.Join(dir, "gw")}
	if err := os.Mkdir(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A port freed just before versitygw takes it may be taken by
	// someone else in between: try again on another.
	var err error
	for range 3 {
		if err = s.start(t, bin, dir); err == nil {
			return s
		}
	}
	t.Fatalf("start versitygw: %v", err)
	return nil
}

func (s *Server) start(t testing.TB, bin, dir string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.Endpoint = "http://" + addr
	var out bytes.Buffer
	cmd := exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", "us-east-1", "--quiet", "posix", "--sidecar", filepath.Join(dir, "meta"), s.Dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := os.MkdirAll(filepath.Join(dir, "meta"), 0o700); err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c := s.Client()
	for {
		_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.Bucket})
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("versitygw exited (%v): %s", werr, out.String())
		case <-ctx.Done():
			stop()
			return fmt.Errorf("versitygw on %s did not answer: %v: %s", addr, err, out.String())
		case <-time.After(20 * time.Millisecond): // poll again: it is still starting
		}
	}
	t.Cleanup(stop)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
