package campaignq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovtoolkit/ovrun/internal/every"
)

// Runner runs one block of one kind on this machine.
type Runner interface {
	// RunBlock runs b.Item's block and leaves its result files under
	// b.Out. It returns ctx.Err() when cancelled, and an error wrapping
	// ErrCannotRun when this machine cannot run the block at all (a
	// missing model or binary): the block goes back to the queue for
	// another worker. A run that fails is a result, not an error: the
	// runner records it in its files and returns nil.
	RunBlock(ctx context.Context, b *Block) error
}

// ErrCannotRun: the worker cannot run a block (a missing file, an unknown
// kind); the block is handed back for another worker.
var ErrCannotRun = errors.New("cannot run the block here")

// Block is one delivery of a work item to this worker.
type Block struct {
	Item *Item
	// Out is where the runner leaves the result files (bundled with
	// their paths relative to Out); Scratch is a private folder for
	// caches and temporaries. Both are removed after the block.
	Out, Scratch string
	// Delivery names the attempt ("s<stream sequence>-d<delivery count>").
	Delivery string
}

// Worker pulls blocks from the classes its labels meet and runs them one at
// a time.
type Worker struct {
	Queue  *Queue
	Name   string
	Host   string
	Labels Labels
	// Machine describes this machine (JSON), read at the start of each
	// block; nil leaves Record.Machine empty.
	Machine func() json.RawMessage
	// Dir holds the blocks' working folders.
	Dir string
	// Runners run the items by kind.
	Runners map[string]Runner
	// Log, when set, is told what the worker does, one line at a time.
	Log func(format string, args ...any)
	// Poll is how long one pull waits for a block (default 1 s); Relist
	// how often the classes are listed again (default 5 s).
	Poll, Relist time.Duration
	// Heartbeat overrides the interval of InProgress (default a third of
	// the class's AckWait). Tests set it beyond AckWait to play a worker
	// that is alive but cut off.
	Heartbeat time.Duration
	// handback is the delay before a block this worker cannot run is
	// offered again (default 5 s).
	handback time.Duration
}

// class is a requirement class this worker may pull from.
type class struct {
	req     Labels
	cons    jetstream.Consumer
	ackWait time.Duration
}

// Run pulls and runs blocks until ctx ends. A block running when ctx ends
// is handed back at once (Nak) for another worker; Run then returns
// ctx.Err().
func (w *Worker) Run(ctx context.Context) error {
	poll, relist := cmpDur(w.Poll, time.Second), cmpDur(w.Relist, 5*time.Second)
	var classes []class
	var listed time.Time
	warned := false
	for turn := 0; ctx.Err() == nil; turn++ {
		if time.Since(listed) >= relist {
			cs, err := w.classes(ctx)
			if err != nil && ctx.Err() == nil {
				w.logf("list classes: %v", err)
			}
			if err == nil {
				classes, listed = cs, time.Now()
			}
			if len(classes) == 0 && !warned {
				w.logf("no class of blocks asks for what labels %q meet yet; waiting", w.Labels.String())
				warned = true
			}
		}
		if len(classes) == 0 {
			sleep(ctx, poll)
			continue
		}
		for i := range classes {
			c := classes[(turn+i)%len(classes)]
			msg, err := c.cons.Next(jetstream.FetchMaxWait(poll))
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					w.logf("pull class %s: %v", ClassDir(c.req), err)
					listed = time.Time{}
					sleep(ctx, poll)
				}
				break
			}
			w.handle(ctx, c, msg)
			break
		}
	}
	return ctx.Err()
}

// classes lists the consumers of the stream and keeps those whose class
// this worker's labels meet.
func (w *Worker) classes(ctx context.Context) ([]class, error) {
	var out []class
	l := w.Queue.stream.ListConsumers(ctx)
	for info := range l.Info() {
		tok, ok := strings.CutPrefix(info.Name, consumerPrefix)
		if !ok {
			continue
		}
		req, err := ParseClassToken(tok)
		if err != nil || !req.MetBy(w.Labels) {
			continue
		}
		cons, err := w.Queue.stream.Consumer(ctx, info.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, class{req: req, cons: cons, ackWait: info.Config.AckWait})
	}
	return out, l.Err()
}

// handle runs one delivered block and commits it.
func (w *Worker) handle(ctx context.Context, c class, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		w.logf("message without metadata: %v", err)
		msg.Nak()
		return
	}
	it, err := DecodeItem(msg.Data())
	if err == nil && it.Requires.String() != c.req.String() {
		err = fmt.Errorf("%w: requires %s on the subject of class %s", ErrItem, ClassDir(it.Requires), ClassDir(c.req))
	}
	if err != nil {
		w.logf("stream message %d dropped: %v", meta.Sequence.Stream, err)
		msg.Term() // no worker could run it
		return
	}
	name := fmt.Sprintf("block %d of class %s (campaign %s)", it.Block, ClassDir(it.Requires), it.Campaign)
	if rec, err := w.Queue.Committed(ctx, it.Key()); err != nil {
		w.handBack(msg, name, err)
		return
	} else if rec != nil {
		// Committed by an earlier delivery whose acknowledgement was lost.
		w.logf("%s: already counted (delivery %s); acknowledged", name, rec.Delivery)
		msg.Ack()
		return
	}
	runner := w.Runners[it.Kind]
	if runner == nil {
		w.handBack(msg, name, fmt.Errorf("%w: this worker runs no %s items", ErrCannotRun, it.Kind))
		return
	}
	delivery := fmt.Sprintf("s%d-d%d", meta.Sequence.Stream, meta.NumDelivered)
	dir := filepath.Join(w.Dir, it.Campaign, ClassToken(it.Requires), strconv.Itoa(it.Block), delivery)
	b := &Block{Item: it, Out: filepath.Join(dir, "out"), Scratch: filepath.Join(dir, "scratch"), Delivery: delivery}
	defer os.RemoveAll(dir)
	for _, d := range []string{b.Out, b.Scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			w.handBack(msg, name, fmt.Errorf("%w: %w", ErrCannotRun, err))
			return
		}
	}
	stop := w.heartbeat(msg, c.ackWait)
	defer stop()
	w.logf("%s: running (delivery %d of at most %d)", name, meta.NumDelivered, MaxDeliver)
	rec := &Record{Campaign: it.Campaign, Requires: it.Requires, Block: it.Block, Kind: it.Kind,
		Delivery: delivery, Deliveries: meta.NumDelivered, Object: objectName(it, delivery),
		Worker: w.Name, Host: w.Host, Labels: w.Labels, StartedAt: time.Now().UTC()}
	if w.Machine != nil {
		rec.Machine = w.Machine()
	}
	err = runner.RunBlock(ctx, b)
	if ctx.Err() != nil {
		stop()
		msg.Nak() // to another worker, now
		w.logf("%s: interrupted; handed back", name)
		return
	}
	if err != nil {
		stop()
		w.handBack(msg, name, err)
		return
	}
	rec.FinishedAt = time.Now().UTC()
	rec.WallS = rec.FinishedAt.Sub(rec.StartedAt).Seconds()
	won, err := w.commit(ctx, b, rec)
	stop()
	switch {
	case err != nil:
		w.handBack(msg, name, err)
	case !won:
		w.logf("%s: another delivery completed it first; these results are dropped", name)
		msg.Ack()
	default:
		if err := msg.DoubleAck(ctx); err != nil {
			// Committed: a redelivery finds the record and acknowledges.
			w.logf("%s: committed, but the acknowledgement failed: %v", name, err)
		}
		w.logf("%s: done in %.1f s", name, rec.WallS)
	}
}

// commit stores the block's files as the delivery's object, then creates
// the block's record; won is false when another delivery's record exists.
func (w *Worker) commit(ctx context.Context, b *Block, rec *Record) (won bool, err error) {
	files := Bundle{}
	err = filepath.WalkDir(b.Out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(b.Out, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		return false, err
	}
	data, err := json.Marshal(files)
	if err != nil {
		return false, err
	}
	if _, err := w.Queue.results.PutBytes(ctx, rec.Object, data); err != nil {
		return false, fmt.Errorf("%w: store results: %w", ErrQueue, err)
	}
	rb, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	_, err = w.Queue.done.Create(ctx, b.Item.Key(), rb)
	if errors.Is(err, jetstream.ErrKeyExists) {
		w.Queue.results.Delete(ctx, rec.Object)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: commit: %w", ErrQueue, err)
	}
	return true, nil
}

// heartbeat tells JetStream the block is still being worked on, every
// third of the class's AckWait, until stop is called.
func (w *Worker) heartbeat(msg jetstream.Msg, ackWait time.Duration) (stop func()) {
	interval := w.Heartbeat
	if interval <= 0 {
		interval = cmpDur(ackWait, DefaultAckWait) / 3
	}
	return every.Start(interval, func() { msg.InProgress() })
}

// handBack offers the block again after a delay, for another worker.
func (w *Worker) handBack(msg jetstream.Msg, name string, err error) {
	w.logf("%s: handed back: %v", name, err)
	msg.NakWithDelay(cmpDur(w.handback, 5*time.Second))
}

func (w *Worker) logf(format string, args ...any) {
	if w.Log != nil {
		w.Log(format, args...)
	}
}

func cmpDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
