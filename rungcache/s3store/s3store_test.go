package s3store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ovtoolkit/ovrun/rungcache"
)

func key(i int) rungcache.Key {
	return rungcache.KeyOf(rungcache.Parts{Device: "CPU", Capacity: i, Chunk: 1, Kind: "decode"})
}

// meta is the metadata of a blob of k of n bytes (the store checks only
// its form; the cache checks the CRCs).
func meta(k rungcache.Key, n int) rungcache.Meta {
	return rungcache.Meta{Format: rungcache.FormatVersion, Key: k.String(), Size: int64(n), CRC32C: []uint32{1}, Kind: "decode", Capacity: 64, Chunk: 1, Device: "CPU"}
}

func fakeStore(t *testing.T) (*Store, *fakeS3) {
	t.Helper()
	f := newFakeS3("rungs")
	return newStore(f, "rungs", "fleet/", "s3://rungs/fleet"), f
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		url, bucket, prefix, err string
	}{
		{"s3://rungs", "rungs", "", ""},
		{"s3://rungs/", "rungs", "", ""},
		{"s3://rungs/fleet", "rungs", "fleet/", ""},
		{"s3://rungs/fleet/smollm2/", "rungs", "fleet/smollm2/", ""},
		{"s3://my.bucket-1/p", "my.bucket-1", "p/", ""},
		{"s3://", "", "", "is not a bucket name"},
		{"s3://Rungs/p", "", "", "is not a bucket name"},
		{"s3://ab/p", "", "", "is not a bucket name"},
		{"s3://rungs:9000/p", "", "", "no user or port"},
		{"s3://key@rungs/p", "", "", "no user or port"},
		{"s3://rungs/p?region=eu", "", "", "no query"},
		{"s3://rungs/a//b", "", "", "empty, . or .."},
		{"s3://rungs/a/../b", "", "", "empty, . or .."},
		{"gs://rungs/p", "", "", "not s3://"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			bucket, prefix, err := parse(tc.url)
			switch {
			case tc.err == "" && (err != nil || bucket != tc.bucket || prefix != tc.prefix):
				t.Errorf("parse = %q, %q, %v; want %q, %q", bucket, prefix, err, tc.bucket, tc.prefix)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, rungcache.ErrStoreURL)):
				t.Errorf("parse error %v, want one naming %q and wrapping ErrStoreURL", err, tc.err)
			}
		})
	}
}

// An entry is a blob object of its writer's own, then the metadata naming
// it, then (when used) the last-use object; all under the prefix.
func TestPublishFetchLayout(t *testing.T) {
	s, f := fakeStore(t)
	ctx := context.Background()
	k := key(64)
	blob := bytes.Repeat([]byte("compiled "), 100)
	if ok, err := s.Stat(ctx, k); ok || err != nil {
		t.Fatalf("Stat of an empty bucket: %v, %v", ok, err)
	}
	if _, ok, err := s.Fetch(ctx, k, &bytes.Buffer{}); ok || err != nil {
		t.Fatalf("Fetch of an empty bucket: %v, %v", ok, err)
	}
	if err := s.Publish(ctx, k, meta(k, len(blob)), bytes.NewReader(blob), int64(len(blob))); err != nil {
		t.Fatal(err)
	}
	names := f.names()
	blobRe := regexp.MustCompile(`^fleet/` + k.String() + `\.[0-9a-f]{16}\.blob$`)
	if len(names) != 2 || !blobRe.MatchString(names[0]) || names[1] != "fleet/"+k.String()+".json" {
		t.Fatalf("objects %q, want fleet/KEY.ID.blob and fleet/KEY.json", names)
	}
	mb, _ := f.object(names[1])
	var m rungcache.Meta
	if err := json.Unmarshal(mb, &m); err != nil || "fleet/"+m.Object != names[0] || m.Size != int64(len(blob)) || m.Capacity != 64 {
		t.Fatalf("metadata %s (%v): want it to name %s", mb, err, names[0])
	}
	var got bytes.Buffer
	fm, ok, err := s.Fetch(ctx, k, &got)
	if !ok || err != nil || !bytes.Equal(got.Bytes(), blob) || fm.Object != m.Object {
		t.Fatalf("Fetch: %v, %v, %d bytes, meta %+v", ok, err, got.Len(), fm)
	}
	if ok, err := s.Stat(ctx, k); !ok || err != nil {
		t.Fatalf("Stat after Publish: %v, %v", ok, err)
	}

	t0 := time.Now().Add(time.Hour)
	f.now = func() time.Time { return t0 }
	if err := s.Touch(ctx, k); err != nil {
		t.Fatal(err)
	}
	es, err := s.List(ctx)
	if err != nil || len(es) != 1 {
		t.Fatalf("List: %+v, %v", es, err)
	}
	if e := es[0]; e.Key != k.String() || e.Bytes != int64(len(blob)+len(mb)) || !e.LastUsed.Equal(t0.UTC().Truncate(time.Second)) || e.Capacity != 64 {
		t.Errorf("listed %+v; want %d bytes, last used at the touch (%v)", e, len(blob)+len(mb), t0)
	}
}

// Each publish of a key writes a blob of its own; the metadata names the
// last, and a blob no metadata names goes once it is older than
// StaleAge (a writer still uploading is left alone).
func TestPublishAgainSweepsStaleBlobs(t *testing.T) {
	s, f := fakeStore(t)
	ctx := context.Background()
	k := key(64)
	for _, b := range []string{"first", "second"} {
		if err := s.Publish(ctx, k, meta(k, len(b)), strings.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.names()); n != 3 {
		t.Fatalf("objects %q after two publishes, want 3: the first blob is fresh", f.names())
	}
	f.mu.Lock()
	for n, o := range f.objects {
		o.modified = o.modified.Add(-2 * rungcache.StaleAge)
		f.objects[n] = o
	}
	f.mu.Unlock()
	if err := s.Publish(ctx, k, meta(k, 5), strings.NewReader("third"), 5); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, ok, err := s.Fetch(ctx, k, &got); !ok || err != nil || got.String() != "third" {
		t.Fatalf("Fetch after three publishes: %q, %v, %v", got.String(), ok, err)
	}
	if n := len(f.names()); n != 2 {
		t.Errorf("objects %q after the third publish, want the metadata and the blob it names", f.names())
	}
}

// Remove of an entry someone published over removes only the old blob.
func TestRemoveKeepsANewerEntry(t *testing.T) {
	s, f := fakeStore(t)
	ctx := context.Background()
	k := key(64)
	s.Publish(ctx, k, meta(k, 3), strings.NewReader("old"), 3)
	old, _, _ := s.Fetch(ctx, k, &bytes.Buffer{})
	s.Publish(ctx, k, meta(k, 3), strings.NewReader("new"), 3)
	if err := s.Remove(ctx, k, old.Object); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, ok, err := s.Fetch(ctx, k, &got); !ok || err != nil || got.String() != "new" {
		t.Fatalf("after removing the old entry: %q, %v, %v; want the new one", got.String(), ok, err)
	}
	if _, ok := f.object("fleet/" + old.Object); ok {
		t.Error("the old blob is still there")
	}
	if err := s.Remove(ctx, k, ""); err != nil {
		t.Fatal(err)
	}
	if n := f.names(); len(n) != 0 {
		t.Errorf("after Remove(k, \"\"): %q", n)
	}
	if err := s.Remove(ctx, k, "../../etc.blob"); err == nil {
		t.Error("Remove took an object name that is not the entry's")
	}
}

// A damaged entry is an error that wraps ErrDamaged; other objects under
// the prefix are never read nor removed.
func TestDamagedEntriesAndForeignObjects(t *testing.T) {
	ctx := context.Background()
	k := key(64)
	for _, tc := range []struct {
		name, want string
		damage     func(f *fakeS3, m rungcache.Meta)
	}{
		{"garbage metadata", "not valid JSON", func(f *fakeS3, _ rungcache.Meta) { f.put("fleet/"+k.String()+".json", []byte("{\x00")) }},
		{"blob gone", "is gone", func(f *fakeS3, m rungcache.Meta) { delete(f.objects, "fleet/"+m.Object) }},
		{"metadata names a foreign object", "not one of this entry's", func(f *fakeS3, m rungcache.Meta) {
			b, _ := json.Marshal(func() rungcache.Meta { m.Object = "../secrets"; return m }())
			f.put("fleet/"+k.String()+".json", b)
		}},
		{"metadata of another key", "metadata is for key", func(f *fakeS3, m rungcache.Meta) {
			b, _ := json.Marshal(func() rungcache.Meta { m.Key = key(1).String(); return m }())
			f.put("fleet/"+k.String()+".json", b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f := fakeStore(t)
			f.put("fleet/notes.txt", []byte("mine"))
			f.put("other/"+k.String()+".json", []byte("{}"))
			s.Publish(ctx, k, meta(k, 3), strings.NewReader("abc"), 3)
			m, _, _ := s.Fetch(ctx, k, &bytes.Buffer{})
			f.mu.Lock()
			tc.damage(f, m)
			f.mu.Unlock()
			_, ok, err := s.Fetch(ctx, k, &bytes.Buffer{})
			if !ok || !errors.Is(err, rungcache.ErrDamaged) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Fetch: %v, %v; want ErrDamaged naming %q", ok, err, tc.want)
			}
			es, err := s.List(ctx)
			if err != nil || len(es) != 1 || es[0].Key != k.String() {
				t.Fatalf("List: %+v, %v; want the entry, by its key", es, err)
			}
			if err := s.Remove(ctx, k, ""); err != nil {
				t.Fatal(err)
			}
			if err := s.Sweep(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if got := f.names(); !slices.Equal(got, []string{"fleet/notes.txt", "other/" + k.String() + ".json"}) {
				t.Errorf("left %q, want only the foreign objects", got)
			}
		})
	}
}

// A blob over multipartAbove goes up in parts.
func TestMultipartUpload(t *testing.T) {
	defer func(a, p int64) { multipartAbove, minPart = a, p }(multipartAbove, minPart)
	multipartAbove, minPart = 10, 4
	s, f := fakeStore(t)
	ctx := context.Background()
	k := key(64)
	blob := []byte("a blob of thirty bytes, in 8 p")
	if err := s.Publish(ctx, k, meta(k, len(blob)), bytes.NewReader(blob), int64(len(blob))); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, ok, err := s.Fetch(ctx, k, &got); !ok || err != nil || !bytes.Equal(got.Bytes(), blob) {
		t.Fatalf("Fetch: %q, %v, %v", got.String(), ok, err)
	}
	if f.calls["upload-part"] != 8 || f.calls["complete-multipart"] != 1 {
		t.Errorf("%d parts, %d completes; want 8, 1", f.calls["upload-part"], f.calls["complete-multipart"])
	}
}

// A missing object is a miss; a missing bucket is not (the cache goes on
// without the store, with a note).
func TestNotFound(t *testing.T) {
	resp := func(code int) *awshttp.ResponseError {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("x")}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"NoSuchKey", &s3types.NoSuchKey{}, true},
		{"NotFound", &s3types.NotFound{}, true},
		{"NoSuchBucket", &s3types.NoSuchBucket{}, false},
		{"404 without a code", fmt.Errorf("head: %w", resp(404)), true},
		{"403", resp(403), false},
		{"refused", errors.New("dial tcp: connection refused"), false},
	} {
		if got := notFound(tc.err); got != tc.want {
			t.Errorf("%s: notFound = %v", tc.name, got)
		}
	}
	s, _ := fakeStore(t)
	s.bucket = "gone"
	if _, _, err := s.Fetch(context.Background(), key(64), &bytes.Buffer{}); err == nil || notFound(err) || errors.Is(err, rungcache.ErrDamaged) {
		t.Errorf("Fetch from a missing bucket: %v, want an error that is neither a miss nor damage", err)
	}
}

// Open reads the AWS environment: a custom endpoint means path-style.
func TestOpenFromEnvironment(t *testing.T) {
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	t.Setenv("AWS_ACCESS_KEY_ID", "id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "eu-west-3")
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	s, err := Open(context.Background(), "s3://rungs/fleet")
	if err != nil {
		t.Fatal(err)
	}
	o := s.c.(*s3.Client).Options()
	if !o.UsePathStyle || aws.ToString(o.BaseEndpoint) != "http://127.0.0.1:1" || o.Region != "eu-west-3" {
		t.Errorf("options: path-style %v, endpoint %q, region %q", o.UsePathStyle, aws.ToString(o.BaseEndpoint), o.Region)
	}
	t.Setenv("AWS_ENDPOINT_URL", "")
	os.Unsetenv("AWS_ENDPOINT_URL")
	t.Setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2")
	s, _ = Open(context.Background(), "s3://rungs/fleet")
	if o := s.c.(*s3.Client).Options(); !o.UsePathStyle || aws.ToString(o.BaseEndpoint) != "http://127.0.0.1:2" {
		t.Errorf("AWS_ENDPOINT_URL_S3: path-style %v, endpoint %q", o.UsePathStyle, aws.ToString(o.BaseEndpoint))
	}
	os.Unsetenv("AWS_ENDPOINT_URL_S3")
	s, _ = Open(context.Background(), "s3://rungs/fleet")
	if o := s.c.(*s3.Client).Options(); o.UsePathStyle || o.BaseEndpoint != nil {
		t.Errorf("AWS: path-style %v, endpoint %q; want virtual-hosted on AWS's", o.UsePathStyle, aws.ToString(o.BaseEndpoint))
	}
}
