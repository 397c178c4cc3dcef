package campaignq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream names a campaign and its workers share.
const (
	// BlocksStream holds the work items, one subject per requirement
	// class, with work-queue retention: a block leaves the stream when a
	// worker acknowledges it.
	BlocksStream  = "OVRUN_BLOCKS"
	subjectPrefix = "ovrun.blocks."
	// DoneBucket is the key-value bucket of commits: one Record per block,
	// created by the first delivery that completes it.
	DoneBucket = "ovrun-done"
	// ResultsStore is the object store of the result files, one object
	// per delivery.
	ResultsStore   = "ovrun-results"
	consumerPrefix = "ovrun-"
	// metaRequires is the consumer metadata key holding its class.
	metaRequires = "ovrun.requires"
)

// MaxDeliver is how often JetStream hands a block out before it gives up:
// a block that kills its worker every time (a crash the block itself
// causes, a model too large for the class) stops after five machines
// instead of cycling through the fleet; Drive hears of it through the
// max-deliveries advisory and reports the block as given up. A killed
// worker's block costs one delivery, so five leaves room for real failures.
const MaxDeliver = 5

// DefaultAckWait is how long a delivered block may go without a heartbeat
// before JetStream hands it to another worker. Workers heartbeat (Msg
// InProgress) every third of it, so a block of any length stays with its
// worker while the worker lives, and a killed worker's block moves on
// after at most this long. 30 s rides out a stalled network or a busy
// machine's pauses without leaving a dead worker's block idle for long.
const DefaultAckWait = 30 * time.Second

// ErrQueue: the queue server cannot be reached or refused an operation.
var ErrQueue = errors.New("queue")

// CheckURL checks a --queue value: nats://HOST:PORT or tls://HOST:PORT.
func CheckURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
		return fmt.Errorf("--queue %q: want nats://HOST:PORT (or tls://HOST:PORT)", s)
	}
	return nil
}

// Queue is a connection to the campaign queue: the stream, the commit
// bucket and the result store, created on first use.
type Queue struct {
	URL     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	done    jetstream.KeyValue
	results jetstream.ObjectStore
}

// Open connects to the NATS server at u and makes sure the stream, bucket
// and store exist (creating them is idempotent: every campaign and worker
// asks for the same configuration).
func Open(ctx context.Context, u, name string) (*Queue, error) {
	if err := CheckURL(u); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(u, nats.Name(name), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrQueue, u, err)
	}
	q := &Queue{URL: u, nc: nc}
	if err := q.setup(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w %s: %w", ErrQueue, u, err)
	}
	return q, nil
}

func (q *Queue) setup(ctx context.Context) error {
	var err error
	if q.js, err = jetstream.New(q.nc); err != nil {
		return err
	}
	cfg := jetstream.StreamConfig{
		Name: BlocksStream, Description: "ovrun campaign blocks, one subject per requirement class",
		Subjects: []string{subjectPrefix + "*"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
	}
	// Two processes starting at once may both try to create it: the
	// loser's error goes away on a second try.
	for try := 0; ; try++ {
		q.stream, err = q.js.CreateOrUpdateStream(ctx, cfg)
		if err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", BlocksStream, err)
	}
	for try := 0; ; try++ {
		q.done, err = q.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: DoneBucket, Description: "ovrun campaign blocks committed: the first completed delivery of each", History: 1})
		if err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("bucket %s: %w", DoneBucket, err)
	}
	for try := 0; ; try++ {
		q.results, err = q.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: ResultsStore, Description: "ovrun campaign result files, one object per delivery"})
		if err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("object store %s: %w", ResultsStore, err)
	}
	return nil
}

// Close closes the connection.
func (q *Queue) Close() error {
	q.nc.Close()
	return nil
}

// SubjectOf is the subject of a requirement class.
func SubjectOf(req Labels) string { return subjectPrefix + ClassToken(req) }

// ConsumerOf is the durable consumer of a requirement class: every worker
// whose labels meet the class pulls from it, and no two classes' filters
// overlap.
func ConsumerOf(req Labels) string { return consumerPrefix + ClassToken(req) }

// EnsureClass creates (or updates) the consumer of a class. ackWait is a
// setting of the class's consumer, so the latest campaign's holds for
// every block of the class still waiting.
func (q *Queue) EnsureClass(ctx context.Context, req Labels, ackWait time.Duration) error {
	_, err := q.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       ConsumerOf(req),
		Description:   "ovrun blocks requiring " + ClassDir(req),
		FilterSubject: SubjectOf(req),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    MaxDeliver,
		Metadata:      map[string]string{metaRequires: req.String()},
	})
	if err != nil {
		return fmt.Errorf("%w: consumer of class %s: %w", ErrQueue, ClassDir(req), err)
	}
	return nil
}

// Publish puts an item on its class's subject and returns its stream
// sequence. A second publish of the same block within ten minutes is
// dropped by JetStream (Nats-Msg-Id) and returns the first's sequence.
func (q *Queue) Publish(ctx context.Context, it *Item) (uint64, error) {
	b, err := it.Encode()
	if err != nil {
		return 0, err
	}
	ack, err := q.js.Publish(ctx, it.Subject(), b, jetstream.WithMsgID(it.MsgID()))
	if err != nil {
		return 0, fmt.Errorf("%w: publish block %d of class %s: %w", ErrQueue, it.Block, ClassDir(it.Requires), err)
	}
	return ack.Sequence, nil
}

// Committed returns the record of a block, nil when no delivery has
// completed it yet.
func (q *Queue) Committed(ctx context.Context, key string) (*Record, error) {
	e, err := q.done.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrQueue, key, err)
	}
	return decodeRecord(e.Value())
}

func decodeRecord(b []byte) (*Record, error) {
	rec := new(Record)
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("%w: commit record: %w", ErrItem, err)
	}
	if rec.Requires == nil {
		rec.Requires = Labels{}
	}
	return rec, nil
}

// Results fetches the result files of a committed block.
func (q *Queue) Results(ctx context.Context, rec *Record) (Bundle, error) {
	info, err := q.results.GetInfo(ctx, rec.Object)
	if err != nil {
		return nil, fmt.Errorf("%w: results %s: %w", ErrQueue, rec.Object, err)
	}
	if info.Size > maxBundleBytes {
		return nil, fmt.Errorf("results %s: %d bytes, more than %d", rec.Object, info.Size, maxBundleBytes)
	}
	b, err := q.results.GetBytes(ctx, rec.Object)
	if err != nil {
		return nil, fmt.Errorf("%w: results %s: %w", ErrQueue, rec.Object, err)
	}
	return decodeBundle(b)
}
