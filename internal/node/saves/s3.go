package saves

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/cove-dev/cove/api"
)

// S3 keeps saves in a bucket of an S3-compatible service, every
// generation under its own prefix:
//
//	<prefix>/saves/<sandbox id>/<generation>/disk.gz
//	<prefix>/saves/<sandbox id>/<generation>/output.tar.gz
//	<prefix>/saves/<sandbox id>/<generation>/manifest.json   (written last)
//	<prefix>/images/sha256-<hex>.tar                          (blobs)
//
// Archives stream up as multipart uploads, so a save holds at most one
// part in memory whatever the disk's size. Every generation stays until
// Delete: which one a sandbox wakes from is the caller's to say.
type S3 struct {
	client   *s3.Client
	http     *http.Client
	bucket   string
	prefix   string
	partSize int
}

var _ Store = (*S3)(nil)

// defaultPartSize is the size of a multipart upload's parts: 10,000 parts
// (the most S3 takes) make 160 GiB.
const defaultPartSize = 16 << 20

// OpenS3 returns the store of an s3://bucket/prefix URL. Its endpoint
// query parameter is the service's base URL (default: AWS's, by region);
// addressing is path-style. Credentials come from credsFile (a shared
// credentials file, profile AWS_PROFILE or default) when set, else from
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; the
// region from AWS_REGION, else us-east-1.
func OpenS3(ctx context.Context, u *url.URL, credsFile string) (*S3, error) {
	if u.Host == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "saves: %s names no bucket (s3://bucket/prefix)", u.Redacted())
	}
	if u.User != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "saves: credentials do not go in the URL; use the AWS_* variables or --saves-credentials")
	}
	q := u.Query()
	var endpoint string
	for k, v := range q {
		if k != "endpoint" || len(v) != 1 {
			return nil, api.Errorf(api.CodeInvalidArgument, "saves: unknown parameter %q in %s (only endpoint=URL)", k, u.Redacted())
		}
		endpoint = v[0]
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, api.Errorf(api.CodeInvalidArgument, "saves: endpoint %q is not an http(s)://HOST:PORT URL", endpoint)
		}
	}
	creds, err := loadCredentials(ctx, credsFile)
	if err != nil {
		return nil, err
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A service that accepts a request and never answers fails it
	// (completing a large multipart upload may take the service a while).
	tr.ResponseHeaderTimeout = 5 * time.Minute
	hc := &http.Client{Transport: tr}
	opts := s3.Options{
		Region:       region,
		Credentials:  credentials.StaticCredentialsProvider{Value: creds},
		UsePathStyle: true,
		HTTPClient:   hc,
		// Checksums beyond what S3 requires are left out: S3-compatible
		// services differ in which they take; the manifests carry
		// sha-256 of every archive.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	return &S3{
		client: s3.New(opts), http: hc, bucket: u.Host,
		prefix: strings.Trim(u.Path, "/"), partSize: defaultPartSize,
	}, nil
}

func loadCredentials(ctx context.Context, file string) (aws.Credentials, error) {
	var c aws.Credentials
	if file != "" {
		profile := os.Getenv("AWS_PROFILE")
		if profile == "" {
			profile = "default"
		}
		sc, err := config.LoadSharedConfigProfile(ctx, profile, func(o *config.LoadSharedConfigOptions) {
			o.CredentialsFiles = []string{file}
			o.ConfigFiles = []string{}
		})
		if err != nil {
			return c, fmt.Errorf("saves: credentials file %s: %w", file, err)
		}
		c = sc.Credentials
		if !c.HasKeys() {
			return c, fmt.Errorf("saves: credentials file %s has no keys for profile %s", file, profile)
		}
		return c, nil
	}
	c = aws.Credentials{
		AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
		Source:          "environment",
	}
	if !c.HasKeys() {
		return c, errors.New("saves: an s3:// store needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file")
	}
	return c, nil
}

// Close closes the store's idle connections.
func (s *S3) Close() error {
	s.http.CloseIdleConnections()
	return nil
}

// key joins the store's prefix and parts into an object key.
func (s *S3) key(parts ...string) string {
	if s.prefix != "" {
		parts = append([]string{s.prefix}, parts...)
	}
	return strings.Join(parts, "/")
}

func (s *S3) saveKey(id, gen, name string) string { return s.key("saves", id, gen, name) }

// Save uploads files as generation gen of the save of id, the manifest
// last; a failed save's objects are removed (a save cut short without
// that has no manifest and is never taken for complete).
func (s *S3) Save(ctx context.Context, id, gen string, files Files) (Manifest, error) {
	if err := checkID(id); err != nil {
		return Manifest{}, err
	}
	if err := checkGen(gen); err != nil {
		return Manifest{}, err
	}
	m := Manifest{SandboxID: id, Generation: gen, Format: format}
	err := s.upload(ctx, s.saveKey(id, gen, archiveName), func(w io.Writer) error {
		return writeDisk(ctx, w, files.Disk, &m)
	}, nil)
	if err == nil && files.Output != "" {
		err = s.upload(ctx, s.saveKey(id, gen, outputName), func(w io.Writer) error {
			return writeOutput(ctx, w, files.Output, &m)
		}, nil)
	}
	if err == nil {
		m.CreatedAt = time.Now().UTC()
		b, _ := json.MarshalIndent(m, "", "  ")
		err = s.upload(ctx, s.saveKey(id, gen, manifest), func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		}, nil)
	}
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		s.deletePrefix(dctx, s.key("saves", id, gen)+"/")
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	return m, nil
}

// Stat returns the manifest of generation gen, or of the newest complete
// one for "".
func (s *S3) Stat(ctx context.Context, id, gen string) (Manifest, error) {
	if err := checkID(id); err != nil {
		return Manifest{}, err
	}
	if gen == "" {
		g, err := s.newest(ctx, id)
		if err != nil {
			return Manifest{}, err
		}
		gen = g
	} else if err := checkGen(gen); err != nil {
		return Manifest{}, err
	}
	body, err := s.get(ctx, s.saveKey(id, gen, manifest))
	if api.ErrorCode(err) == api.CodeNotFound {
		return Manifest{}, api.Errorf(api.CodeNotFound, "no complete save of sandbox %s of generation %s", id, gen)
	}
	if err != nil {
		return Manifest{}, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, 1<<16))
	if err != nil {
		return Manifest{}, fmt.Errorf("read manifest of %s: %w", id, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("save of %s: manifest is unreadable", id)
	}
	if err := checkManifest(m, id, gen); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// newest is the newest generation of id that has a manifest.
func (s *S3) newest(ctx context.Context, id string) (string, error) {
	prefix := s.key("saves", id) + "/"
	var best string
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("list saves of %s: %w", id, err)
		}
		for _, o := range page.Contents {
			gen, name, ok := strings.Cut(strings.TrimPrefix(aws.ToString(o.Key), prefix), "/")
			if ok && name == manifest && checkGen(gen) == nil && (best == "" || newer(gen, best)) {
				best = gen
			}
		}
	}
	if best == "" {
		return "", api.Errorf(api.CodeNotFound, "no complete save of sandbox %s", id)
	}
	return best, nil
}

// Restore downloads generation gen ("" the newest complete) into files,
// checking the archives' checksums.
func (s *S3) Restore(ctx context.Context, id, gen string, files Files) (Manifest, error) {
	m, err := s.Stat(ctx, id, gen)
	if err != nil {
		return m, err
	}
	err = restoreFrom(ctx, m, files, func(name string) (io.ReadCloser, error) {
		return s.get(ctx, s.saveKey(id, m.Generation, name))
	})
	if err != nil {
		return m, fmt.Errorf("restore %s: %w", id, err)
	}
	return m, nil
}

// Delete removes every generation of the save of id, and uploads of it
// left unfinished.
func (s *S3) Delete(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := s.deletePrefix(ctx, s.key("saves", id)+"/"); err != nil {
		return fmt.Errorf("delete save of %s: %w", id, err)
	}
	return nil
}

// Prune removes every generation of the save of id but keep, and
// unfinished uploads of the others.
func (s *S3) Prune(ctx context.Context, id, keep string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkGen(keep); err != nil {
		return err
	}
	prefix := s.key("saves", id) + "/"
	if err := s.deleteUnder(ctx, prefix, prefix+keep+"/"); err != nil {
		return fmt.Errorf("prune saves of %s: %w", id, err)
	}
	return nil
}

// deletePrefix removes every object under prefix and aborts the
// multipart uploads under it.
func (s *S3) deletePrefix(ctx context.Context, prefix string) error {
	return s.deleteUnder(ctx, prefix, "")
}

// deleteUnder removes every object under prefix but those under keep
// ("" keeps none), and aborts the multipart uploads likewise.
func (s *S3) deleteUnder(ctx context.Context, prefix, keep string) error {
	kept := func(key *string) bool { return keep != "" && strings.HasPrefix(aws.ToString(key), keep) }
	var errs []error
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			if !kept(o.Key) {
				ids = append(ids, types.ObjectIdentifier{Key: o.Key})
			}
		}
		if len(ids) == 0 {
			continue
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &s.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return err
		}
		for _, e := range out.Errors {
			errs = append(errs, fmt.Errorf("delete %s: %s", aws.ToString(e.Key), aws.ToString(e.Message)))
		}
	}
	up, err := s.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: &prefix})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, u := range up.Uploads {
		if kept(u.Key) {
			continue
		}
		if _, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: &s.bucket, Key: u.Key, UploadId: u.UploadId,
		}); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PutBlob uploads r as the blob of digest; bytes of another digest are
// refused before the upload completes, so nothing is kept of them.
func (s *S3) PutBlob(ctx context.Context, digest string, r io.Reader) error {
	name, err := blobName(digest)
	if err != nil {
		return err
	}
	sum := sha256.New()
	return s.upload(ctx, s.key("images", name), func(w io.Writer) error {
		_, err := io.Copy(io.MultiWriter(w, sum), r)
		return err
	}, func() error { return matchDigest(digest, sum.Sum(nil)) })
}

// GetBlob downloads the blob of digest; its reader fails at the end when
// the bytes do not match.
func (s *S3) GetBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	name, err := blobName(digest)
	if err != nil {
		return nil, err
	}
	body, err := s.get(ctx, s.key("images", name))
	if err != nil {
		return nil, err
	}
	return newVerifying(body, digest), nil
}

// get opens an object; a missing one is not_found.
func (s *S3) get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if isNotFound(err) {
		return nil, api.Errorf(api.CodeNotFound, "no object %s", key)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return out.Body, nil
}

func isNotFound(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return true
		}
	}
	return false
}

// upload streams what fn writes to the object key: in one PUT when it
// fits in one part, else as a multipart upload, aborted on failure. check,
// when set, is asked before the object is completed; its error keeps the
// object from existing.
func (s *S3) upload(ctx context.Context, key string, fn func(io.Writer) error, check func() error) error {
	u := &uploader{s: s, ctx: ctx, key: key, buf: make([]byte, 0, s.partSize)}
	err := fn(u)
	if err == nil && check != nil {
		err = check()
	}
	if err == nil {
		err = u.finish()
	}
	if err != nil {
		u.abort()
		return err
	}
	return nil
}

// uploader is an io.Writer that uploads what it is given in parts.
type uploader struct {
	s     *S3
	ctx   context.Context
	key   string
	buf   []byte
	id    *string // the multipart upload, once started
	parts []types.CompletedPart
	err   error
}

func (u *uploader) Write(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	written := 0
	for len(p) > 0 {
		if len(u.buf) == cap(u.buf) {
			if u.err = u.flush(); u.err != nil {
				return written, u.err
			}
		}
		k := copy(u.buf[len(u.buf):cap(u.buf)], p)
		u.buf = u.buf[:len(u.buf)+k]
		p = p[k:]
		written += k
	}
	return written, nil
}

// flush uploads the buffer as the next part, starting the multipart
// upload at the first.
func (u *uploader) flush() error {
	c := u.s.client
	if u.id == nil {
		out, err := c.CreateMultipartUpload(u.ctx, &s3.CreateMultipartUploadInput{Bucket: &u.s.bucket, Key: &u.key})
		if err != nil {
			return fmt.Errorf("start upload of %s: %w", u.key, err)
		}
		u.id = out.UploadId
	}
	n := int32(len(u.parts) + 1)
	out, err := c.UploadPart(u.ctx, &s3.UploadPartInput{
		Bucket: &u.s.bucket, Key: &u.key, UploadId: u.id, PartNumber: &n,
		Body: bytes.NewReader(u.buf), ContentLength: aws.Int64(int64(len(u.buf))),
	})
	if err != nil {
		return fmt.Errorf("upload part %d of %s: %w", n, u.key, err)
	}
	u.parts = append(u.parts, types.CompletedPart{ETag: out.ETag, PartNumber: &n})
	u.buf = u.buf[:0]
	return nil
}

func (u *uploader) finish() error {
	if u.err != nil {
		return u.err
	}
	if u.id == nil {
		_, err := u.s.client.PutObject(u.ctx, &s3.PutObjectInput{
			Bucket: &u.s.bucket, Key: &u.key,
			Body: bytes.NewReader(u.buf), ContentLength: aws.Int64(int64(len(u.buf))),
		})
		if err != nil {
			return fmt.Errorf("put %s: %w", u.key, err)
		}
		return nil
	}
	if len(u.buf) > 0 {
		if err := u.flush(); err != nil {
			return err
		}
	}
	_, err := u.s.client.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &u.s.bucket, Key: &u.key, UploadId: u.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts},
	})
	if err != nil {
		return fmt.Errorf("complete upload of %s: %w", u.key, err)
	}
	u.id = nil
	return nil
}

// abort drops a multipart upload that will not complete.
func (u *uploader) abort() {
	if u.id == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 30*time.Second)
	defer cancel()
	u.s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &u.s.bucket, Key: &u.key, UploadId: u.id})
	u.id = nil
}
