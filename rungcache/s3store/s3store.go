// Package s3store is the rung cache's Store in an S3 bucket
// (--cache-dir s3://bucket/prefix), on aws-sdk-go-v2: the endpoint, region
// and credentials come the usual AWS ways (AWS_ENDPOINT_URL or
// AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared config and credentials
// files, SSO, web identity, instance roles), with path-style addressing
// where a custom endpoint is set (an S3-compatible server).
//
// An entry KEY (64 hex digits) is up to three objects under the prefix:
//
//	KEY.ID.blob  the blob file (export and key trailer), ID 16 random hex digits
//	KEY.json     the metadata (rungcache.Meta), naming its blob in "object"
//	KEY.used     empty; its modification time is the entry's last use
//
// A writer uploads its blob under a name of its own, then writes the
// metadata: an S3 PUT replaces an object whole, so a reader sees the old
// metadata or the new one, each naming a blob that was whole before it,
// and concurrent writers of one key never expose a half-written blob (the
// last metadata wins; the other blobs are left to Sweep after
// rungcache.StaleAge). Readers trust nothing until the cache has checked
// the blob's size, CRC-32Cs and key trailer against the metadata. The last
// use is an empty KEY.used put over (a PUT of no bytes, cheaper and more
// widely supported than copying the metadata onto itself to change its
// metadata); an entry never touched was last used when its metadata was
// written. Only objects named like these are read or removed.
package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/ovtoolkit/ovrun/rungcache"
)

func init() { rungcache.RegisterStore("s3", Check, open) }

// api is the part of the S3 client the store calls (an in-memory fake in
// the unit tests).
type api interface {
	PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(context.Context, *s3.HeadObjectInput, ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	DeleteObject(context.Context, *s3.DeleteObjectInput, ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	ListObjectsV2(context.Context, *s3.ListObjectsV2Input, ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	CreateMultipartUpload(context.Context, *s3.CreateMultipartUploadInput, ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(context.Context, *s3.UploadPartInput, ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	CompleteMultipartUpload(context.Context, *s3.CompleteMultipartUploadInput, ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(context.Context, *s3.AbortMultipartUploadInput, ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

var _ api = (*s3.Client)(nil)

// Store is a bucket and a prefix in it.
type Store struct {
	c      api
	bucket string
	prefix string // "" or ending in "/"
	url    string
}

var _ rungcache.Store = (*Store)(nil)

// bucketName is what S3 accepts as a bucket name (general purpose buckets).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Check checks the form of a store URL, s3://bucket or s3://bucket/prefix.
func Check(raw string) error {
	_, _, err := parse(raw)
	return err
}

func parse(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	bad := func(why string) error {
		return fmt.Errorf("%w: %q: %s (want s3://bucket/prefix)", rungcache.ErrStoreURL, raw, why)
	}
	switch {
	case err != nil:
		return "", "", bad("not a URL")
	case u.Scheme != "s3":
		return "", "", bad("not s3://")
	case u.User != nil || u.Port() != "":
		return "", "", bad("a bucket name has no user or port (the endpoint comes from AWS_ENDPOINT_URL)")
	case u.RawQuery != "" || u.Fragment != "":
		return "", "", bad("no query or fragment")
	case !bucketName.MatchString(u.Host):
		return "", "", bad(fmt.Sprintf("%q is not a bucket name", u.Host))
	}
	prefix = strings.Trim(u.Path, "/")
	for _, seg := range strings.Split(prefix, "/") {
		if prefix != "" && (seg == "" || seg == "." || seg == "..") {
			return "", "", bad(fmt.Sprintf("prefix %q has an empty, . or .. part", prefix))
		}
	}
	if prefix != "" {
		prefix += "/"
	}
	return u.Host, prefix, nil
}

// Client timeouts: a connection that cannot be made, or a response that
// does not start, is an error soon (the cache then goes on without the
// bucket); a transfer in progress is bounded by the cache (no byte moving
// for 30 s).
const (
	dialTimeout     = 5 * time.Second
	responseTimeout = 30 * time.Second
	maxAttempts     = 3
)

func open(ctx context.Context, raw string) (rungcache.Store, error) { return Open(ctx, raw) }

// Open opens the bucket and prefix of the URL raw with the AWS
// configuration of the environment. It makes no request.
func Open(ctx context.Context, raw string) (*Store, error) {
	bucket, prefix, err := parse(raw)
	if err != nil {
		return nil, err
	}
	hc := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = dialTimeout }).
		WithTransportOptions(func(t *http.Transport) { t.ResponseHeaderTimeout = responseTimeout })
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(hc), config.WithRetryMaxAttempts(maxAttempts))
	if err != nil {
		return nil, fmt.Errorf("%s: AWS configuration: %w", raw, err)
	}
	if cfg.Region == "" {
		// S3-compatible servers take any region; AWS wants the bucket's.
		cfg.Region = "us-east-1"
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		// A custom endpoint (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3,
		// endpoint_url in the profile) is an S3-compatible server:
		// bucket.host names need DNS it rarely has.
		o.UsePathStyle = o.BaseEndpoint != nil
		// The cache checks every blob against its CRC-32Cs: a damaged
		// object must reach it (to be discarded with a note), not fail
		// the read as a transfer error would.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return newStore(c, bucket, prefix, raw), nil
}

func newStore(c api, bucket, prefix, raw string) *Store {
	return &Store{c: c, bucket: bucket, prefix: prefix, url: raw}
}

// String is the store's URL.
func (s *Store) String() string { return s.url }

// Object names under the prefix.
var (
	metaName = regexp.MustCompile(`^([0-9a-f]{64})\.json$`)
	usedName = regexp.MustCompile(`^([0-9a-f]{64})\.used$`)
	blobName = regexp.MustCompile(`^([0-9a-f]{64})\.[0-9a-f]{16}\.blob$`)
)

func (s *Store) name(obj string) *string { return aws.String(s.prefix + obj) }

func metaObject(k rungcache.Key) string { return k.String() + ".json" }
func usedObject(k rungcache.Key) string { return k.String() + ".used" }

// isBlobOf reports whether obj is a blob object name of k's.
func isBlobOf(k rungcache.Key, obj string) bool {
	m := blobName.FindStringSubmatch(obj)
	return m != nil && m[1] == k.String()
}

// maxMetaBytes bounds a metadata object read.
const maxMetaBytes = 64 << 10

// Stat reports whether k's metadata object exists.
func (s *Store) Stat(ctx context.Context, k rungcache.Key) (bool, error) {
	_, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: s.name(metaObject(k))})
	switch {
	case err == nil:
		return true, nil
	case notFound(err):
		return false, nil
	}
	return false, err
}

// readMeta reads and parses k's metadata object; ok is false when there
// is none. A metadata object that is not ours wraps rungcache.ErrDamaged.
func (s *Store) readMeta(ctx context.Context, k rungcache.Key) (m rungcache.Meta, ok bool, err error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: s.name(metaObject(k))})
	if notFound(err) {
		return rungcache.Meta{}, false, nil
	}
	if err != nil {
		return rungcache.Meta{}, false, err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, maxMetaBytes+1))
	if err != nil {
		return rungcache.Meta{}, false, err
	}
	if m, err = rungcache.ParseMeta(b); err != nil {
		return rungcache.Meta{}, true, fmt.Errorf("%w: %v", rungcache.ErrDamaged, err)
	}
	switch {
	case m.Key != k.String():
		return rungcache.Meta{}, true, fmt.Errorf("%w: metadata is for key %.12s", rungcache.ErrDamaged, m.Key)
	case !isBlobOf(k, m.Object):
		return rungcache.Meta{}, true, fmt.Errorf("%w: metadata names the blob %q, not one of this entry's", rungcache.ErrDamaged, m.Object)
	}
	return m, true, nil
}

// Fetch writes k's blob to w: the metadata first, then the blob object it
// names (at most the size the metadata states, and one byte more, so an
// object longer than stated is noticed without reading it all).
func (s *Store) Fetch(ctx context.Context, k rungcache.Key, w io.Writer) (rungcache.Meta, bool, error) {
	m, ok, err := s.readMeta(ctx, k)
	if err != nil || !ok {
		return m, ok, err
	}
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: s.name(m.Object)})
	if notFound(err) {
		return m, true, fmt.Errorf("%w: its blob %s is gone", rungcache.ErrDamaged, m.Object)
	}
	if err != nil {
		return m, true, err
	}
	defer out.Body.Close()
	if _, err := io.Copy(w, io.LimitReader(out.Body, m.Size+1)); err != nil {
		return m, true, err
	}
	return m, true, nil
}

// Publish uploads the blob under a name of its own, then writes the
// metadata naming it; then removes this key's blobs no metadata names
// that are older than rungcache.StaleAge (a failure to is no error).
func (s *Store) Publish(ctx context.Context, k rungcache.Key, m rungcache.Meta, r io.ReaderAt, size int64) error {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	m.Object = k.String() + "." + hex.EncodeToString(id[:]) + ".blob"
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := s.upload(ctx, m.Object, r, size); err != nil {
		return err
	}
	_, err = s.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: s.name(metaObject(k)),
		Body: bytes.NewReader(append(mb, '\n')), ContentLength: aws.Int64(int64(len(mb) + 1)), ContentType: aws.String("application/json")})
	if err != nil {
		s.delete(context.WithoutCancel(ctx), m.Object) // best effort: Sweep removes it otherwise
		return err
	}
	// The entry is published; what earlier writers left is housekeeping
	// (Sweep does it too), not a failure of this one.
	s.sweepKey(ctx, k, m.Object, rungcache.StaleAge)
	return nil
}

// Multipart uploads: a blob over multipartAbove goes in parts of at least
// minPart (S3's single PUT takes at most 5 GiB; a part at least 5 MiB, at
// most 10,000 parts).
var (
	multipartAbove int64 = 4 << 30
	minPart        int64 = 64 << 20
)

const maxParts = 10000

// upload puts size bytes of r as the object obj.
func (s *Store) upload(ctx context.Context, obj string, r io.ReaderAt, size int64) error {
	if size <= multipartAbove {
		_, err := s.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: s.name(obj),
			Body: io.NewSectionReader(r, 0, size), ContentLength: aws.Int64(size)})
		return err
	}
	part := max(minPart, (size+maxParts-1)/maxParts)
	up, err := s.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: s.name(obj)})
	if err != nil {
		return err
	}
	abort := func(err error) error {
		_, aerr := s.c.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: s.name(obj), UploadId: up.UploadId})
		return errors.Join(err, aerr)
	}
	var done []s3types.CompletedPart
	for off, n := int64(0), int32(1); off < size; off, n = off+part, n+1 {
		l := min(part, size-off)
		out, err := s.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: s.name(obj), UploadId: up.UploadId,
			PartNumber: aws.Int32(n), Body: io.NewSectionReader(r, off, l), ContentLength: aws.Int64(l)})
		if err != nil {
			return abort(err)
		}
		done = append(done, s3types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
	}
	_, err = s.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: s.name(obj), UploadId: up.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: done}})
	if err != nil {
		return abort(err)
	}
	return nil
}

// Touch puts k's empty last-use object over.
func (s *Store) Touch(ctx context.Context, k rungcache.Key) error {
	_, err := s.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: s.name(usedObject(k)), Body: bytes.NewReader(nil), ContentLength: aws.Int64(0)})
	return err
}

// Remove removes k's entry when its metadata names object (or object is
// empty, or the metadata is not ours), the metadata first so that no
// reader trusts the entry while it goes; when the metadata names another
// blob (a writer published since) only object goes. Between the read of
// the metadata and its removal another writer may publish: its entry then
// goes too, and is compiled again (S3 has no portable delete-if-unchanged).
func (s *Store) Remove(ctx context.Context, k rungcache.Key, object string) error {
	if object != "" && !isBlobOf(k, object) {
		return fmt.Errorf("%q is not a blob of entry %s", object, k.Short())
	}
	m, ok, err := s.readMeta(ctx, k)
	damaged := errors.Is(err, rungcache.ErrDamaged)
	if err != nil && !damaged {
		return err
	}
	if ok && (object == "" || damaged || m.Object == object) {
		if err := s.delete(ctx, metaObject(k)); err != nil {
			return err
		}
		if err := s.delete(ctx, usedObject(k)); err != nil {
			return err
		}
		if m.Object != "" {
			if err := s.delete(ctx, m.Object); err != nil {
				return err
			}
		}
	}
	if object != "" {
		return s.delete(ctx, object)
	}
	return nil
}

func (s *Store) delete(ctx context.Context, obj string) error {
	_, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.name(obj)})
	if notFound(err) {
		return nil
	}
	return err
}

// object is one listed object of ours.
type object struct {
	name     string // under the prefix
	size     int64
	modified time.Time
}

// listing is the objects of ours under the prefix, by key.
type listing struct {
	meta  map[string]object
	used  map[string]object
	blobs map[string][]object
}

// list lists the objects under the prefix whose names are ours; with
// keyPrefix, only those whose names start with it.
func (s *Store) list(ctx context.Context, keyPrefix string) (listing, error) {
	l := listing{meta: map[string]object{}, used: map[string]object{}, blobs: map[string][]object{}}
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + keyPrefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return l, err
		}
		for _, o := range page.Contents {
			name, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok {
				continue
			}
			ob := object{name: name, size: aws.ToInt64(o.Size), modified: aws.ToTime(o.LastModified)}
			if m := metaName.FindStringSubmatch(name); m != nil {
				l.meta[m[1]] = ob
			} else if m := usedName.FindStringSubmatch(name); m != nil {
				l.used[m[1]] = ob
			} else if m := blobName.FindStringSubmatch(name); m != nil {
				l.blobs[m[1]] = append(l.blobs[m[1]], ob)
			}
		}
	}
	return l, nil
}

// listConcurrency is how many metadata objects List reads at once.
const listConcurrency = 8

// List lists the entries: one per metadata object, last used when its
// last-use object (else its metadata) was written, its bytes those of the
// metadata and the blob it names.
func (s *Store) List(ctx context.Context) ([]rungcache.Entry, error) {
	l, err := s.list(ctx, "")
	if err != nil {
		return nil, err
	}
	return s.entries(ctx, l)
}

// listed is an entry read for List, or why it could not be.
type listed struct {
	e   rungcache.Entry
	err error
}

func (s *Store) entries(ctx context.Context, l listing) ([]rungcache.Entry, error) {
	keys := make(chan string)
	results := make(chan listed)
	for range listConcurrency {
		go func() {
			for key := range keys {
				results <- s.entry(ctx, l, key)
			}
		}()
	}
	go func() {
		for key := range l.meta {
			keys <- key
		}
		close(keys)
	}()
	var (
		es   []rungcache.Entry
		errs []error
	)
	for range l.meta {
		r := <-results
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		es = append(es, r.e)
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return es, nil
}

// entry is the listed entry of key.
func (s *Store) entry(ctx context.Context, l listing, key string) (r listed) {
	mo := l.meta[key]
	e := rungcache.Entry{Meta: rungcache.Meta{Key: key}, LastUsed: mo.modified, Bytes: mo.size}
	if u, ok := l.used[key]; ok && u.modified.After(e.LastUsed) {
		e.LastUsed = u.modified
	}
	k, err := rungcache.ParseKey(key)
	if err != nil {
		r.e = e
		return r
	}
	m, ok, err := s.readMeta(ctx, k)
	switch {
	case errors.Is(err, rungcache.ErrDamaged), err == nil && !ok:
		// Listed with its key only (or removed since the listing).
	case err != nil:
		r.err = err
		return r
	default:
		e.Meta = m
		for _, b := range l.blobs[key] {
			if b.name == m.Object {
				e.Bytes += b.size
			}
		}
	}
	r.e = e
	return r
}

// Sweep removes blob objects no metadata names and last-use objects of
// no entry, older than age.
func (s *Store) Sweep(ctx context.Context, age time.Duration) error {
	l, err := s.list(ctx, "")
	if err != nil {
		return err
	}
	return s.sweep(ctx, l, "", age)
}

// sweepKey is Sweep for k's objects only, keeping the blob object keep.
func (s *Store) sweepKey(ctx context.Context, k rungcache.Key, keep string, age time.Duration) error {
	l, err := s.list(ctx, k.String()+".")
	if err != nil {
		return err
	}
	return s.sweep(ctx, l, keep, age)
}

func (s *Store) sweep(ctx context.Context, l listing, keep string, age time.Duration) error {
	es, err := s.entries(ctx, l)
	if err != nil {
		return err
	}
	named := map[string]bool{keep: true}
	for _, e := range es {
		named[e.Object] = true
	}
	now := time.Now()
	for _, bs := range l.blobs {
		for _, b := range bs {
			if !named[b.name] && now.Sub(b.modified) >= age {
				if err := s.delete(ctx, b.name); err != nil {
					return err
				}
			}
		}
	}
	for key, u := range l.used {
		if _, ok := l.meta[key]; !ok && now.Sub(u.modified) >= age {
			if err := s.delete(ctx, u.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// notFound reports whether err says the object is not there (and not
// that the bucket is not).
func notFound(err error) bool {
	if err == nil {
		return false
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchBucket":
			return false
		case "NoSuchKey", "NotFound":
			return true
		}
	}
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound && (ae == nil || ae.ErrorCode() != "NoSuchBucket")
}
