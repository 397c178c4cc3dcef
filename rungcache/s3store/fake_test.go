package s3store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// fakeS3 is one bucket in memory behind the calls the store makes, with
// S3's semantics where the store relies on them: a PUT replaces an object
// whole, a missing object is NoSuchKey (NotFound for HEAD), a delete of a
// missing object succeeds, listings come in pages.
type fakeS3 struct {
	mu      sync.Mutex
	bucket  string
	objects map[string]fakeObject
	uploads map[string]map[int32][]byte
	now     func() time.Time
	pages   int // listing page size
	calls   map[string]int
}

type fakeObject struct {
	data     []byte
	modified time.Time
}

var _ api = (*fakeS3)(nil)

func newFakeS3(bucket string) *fakeS3 {
	return &fakeS3{bucket: bucket, objects: map[string]fakeObject{}, uploads: map[string]map[int32][]byte{}, now: time.Now, pages: 3, calls: map[string]int{}}
}

func (f *fakeS3) check(op string, bucket *string) error {
	f.calls[op]++
	if aws.ToString(bucket) != f.bucket {
		return &s3types.NoSuchBucket{Message: aws.String("The specified bucket does not exist")}
	}
	return nil
}

func (f *fakeS3) put(name string, data []byte) {
	f.objects[name] = fakeObject{data: data, modified: f.now().UTC().Truncate(time.Second)}
}

func (f *fakeS3) PutObject(_ context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	b, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	if in.ContentLength != nil && *in.ContentLength != int64(len(b)) {
		return nil, fmt.Errorf("content length %d, body %d", *in.ContentLength, len(b))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("put", in.Bucket); err != nil {
		return nil, err
	}
	f.put(aws.ToString(in.Key), b)
	return &s3.PutObjectOutput{}, nil
}

func (f *fakeS3) GetObject(_ context.Context, in *s3.GetObjectInput, _ ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("get", in.Bucket); err != nil {
		return nil, err
	}
	o, ok := f.objects[aws.ToString(in.Key)]
	if !ok {
		return nil, &s3types.NoSuchKey{Message: aws.String("The specified key does not exist.")}
	}
	return &s3.GetObjectOutput{Body: io.NopCloser(bytes.NewReader(o.data)), ContentLength: aws.Int64(int64(len(o.data)))}, nil
}

func (f *fakeS3) HeadObject(_ context.Context, in *s3.HeadObjectInput, _ ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("head", in.Bucket); err != nil {
		return nil, err
	}
	o, ok := f.objects[aws.ToString(in.Key)]
	if !ok {
		return nil, &s3types.NotFound{}
	}
	return &s3.HeadObjectOutput{ContentLength: aws.Int64(int64(len(o.data))), LastModified: aws.Time(o.modified)}, nil
}

func (f *fakeS3) DeleteObject(_ context.Context, in *s3.DeleteObjectInput, _ ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("delete", in.Bucket); err != nil {
		return nil, err
	}
	delete(f.objects, aws.ToString(in.Key))
	return &s3.DeleteObjectOutput{}, nil
}

func (f *fakeS3) ListObjectsV2(_ context.Context, in *s3.ListObjectsV2Input, _ ...func(*s3.Options)) (*s3.ListObjectsV2Output, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("list", in.Bucket); err != nil {
		return nil, err
	}
	var names []string
	for n := range f.objects {
		if strings.HasPrefix(n, aws.ToString(in.Prefix)) && n > aws.ToString(in.ContinuationToken) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := &s3.ListObjectsV2Output{}
	if len(names) > f.pages {
		names = names[:f.pages]
		out.IsTruncated, out.NextContinuationToken = aws.Bool(true), aws.String(names[len(names)-1])
	}
	for _, n := range names {
		o := f.objects[n]
		out.Contents = append(out.Contents, s3types.Object{Key: aws.String(n), Size: aws.Int64(int64(len(o.data))), LastModified: aws.Time(o.modified)})
	}
	return out, nil
}

func (f *fakeS3) CreateMultipartUpload(_ context.Context, in *s3.CreateMultipartUploadInput, _ ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("create-multipart", in.Bucket); err != nil {
		return nil, err
	}
	id := fmt.Sprintf("upload-%d", len(f.uploads)+1)
	f.uploads[id] = map[int32][]byte{}
	return &s3.CreateMultipartUploadOutput{UploadId: aws.String(id)}, nil
}

func (f *fakeS3) UploadPart(_ context.Context, in *s3.UploadPartInput, _ ...func(*s3.Options)) (*s3.UploadPartOutput, error) {
	b, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("upload-part", in.Bucket); err != nil {
		return nil, err
	}
	parts, ok := f.uploads[aws.ToString(in.UploadId)]
	if !ok {
		return nil, &s3types.NoSuchUpload{}
	}
	parts[aws.ToInt32(in.PartNumber)] = b
	return &s3.UploadPartOutput{ETag: aws.String(fmt.Sprintf(`"part-%d"`, aws.ToInt32(in.PartNumber)))}, nil
}

func (f *fakeS3) CompleteMultipartUpload(_ context.Context, in *s3.CompleteMultipartUploadInput, _ ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("complete-multipart", in.Bucket); err != nil {
		return nil, err
	}
	parts, ok := f.uploads[aws.ToString(in.UploadId)]
	if !ok {
		return nil, &s3types.NoSuchUpload{}
	}
	var b []byte
	for i, p := range in.MultipartUpload.Parts {
		if aws.ToInt32(p.PartNumber) != int32(i+1) || aws.ToString(p.ETag) != fmt.Sprintf(`"part-%d"`, i+1) {
			return nil, fmt.Errorf("part %d: number %d, ETag %s", i, aws.ToInt32(p.PartNumber), aws.ToString(p.ETag))
		}
		b = append(b, parts[int32(i+1)]...)
	}
	delete(f.uploads, aws.ToString(in.UploadId))
	f.put(aws.ToString(in.Key), b)
	return &s3.CompleteMultipartUploadOutput{}, nil
}

func (f *fakeS3) AbortMultipartUpload(_ context.Context, in *s3.AbortMultipartUploadInput, _ ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check("abort-multipart", in.Bucket); err != nil {
		return nil, err
	}
	delete(f.uploads, aws.ToString(in.UploadId))
	return &s3.AbortMultipartUploadOutput{}, nil
}

// names lists the objects' names.
func (f *fakeS3) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ns []string
	for n := range f.objects {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func (f *fakeS3) object(name string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.objects[name]
	return o.data, ok
}
