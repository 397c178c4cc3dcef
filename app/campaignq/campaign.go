package campaignq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// StateFile is a queued campaign's record in its output folder.
const StateFile = "queue.json"

// State is DIR/queue.json: which campaign the folder collects, from where,
// and what became of each block on the queue.
type State struct {
	Kind     string `json:"kind"`
	Campaign string `json:"campaign"`
	// URL is the queue the blocks were published to.
	URL string `json:"queue"`
	// Classes are the requirement classes, in --requires order; each
	// runs the whole design.
	Classes     []Labels     `json:"classes"`
	Blocks      []BlockState `json:"blocks"`
	PublishedAt time.Time    `json:"published_at"`
	// AckWaitS is the classes' AckWait the campaign set.
	AckWaitS float64 `json:"ack_wait_s"`
	// CollectedAt is when the last block was collected (zero before).
	CollectedAt time.Time `json:"collected_at,omitzero"`
}

// BlockState is one published block.
type BlockState struct {
	Requires Labels `json:"requires"`
	Block    int    `json:"block"`
	// Seq is the item's stream sequence.
	Seq uint64 `json:"seq"`
	// GaveUp says why JetStream stopped delivering the block ("" while
	// it may still run).
	GaveUp string `json:"gave_up,omitempty"`
}

// LoadState reads DIR/queue.json.
func LoadState(dir string) (*State, error) {
	b, err := safefile.ReadFile(filepath.Join(dir, StateFile), 64<<20)
	if err != nil {
		return nil, err
	}
	st := new(State)
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	if !campaignID.MatchString(st.Campaign) {
		return nil, fmt.Errorf("%s: campaign id %q", filepath.Join(dir, StateFile), st.Campaign)
	}
	for i := range st.Blocks {
		if st.Blocks[i].Requires == nil {
			st.Blocks[i].Requires = Labels{}
		}
	}
	return st, nil
}

// Save writes DIR/queue.json.
func (st *State) Save(dir string) error {
	return safefile.WriteJSON(filepath.Join(dir, StateFile), st)
}

// Publish makes the classes' consumers, publishes the items and records
// them in st (saved in dir before and after, so that an interrupted
// publish is seen). A block already published (a second try within ten
// minutes) is not published twice.
func Publish(ctx context.Context, q *Queue, dir string, st *State, items []*Item, ackWait time.Duration) error {
	st.URL, st.AckWaitS = q.URL, ackWait.Seconds()
	if st.PublishedAt.IsZero() {
		st.PublishedAt = time.Now().UTC()
	}
	if err := st.Save(dir); err != nil {
		return err
	}
	for _, req := range st.Classes {
		if err := q.EnsureClass(ctx, req, ackWait); err != nil {
			return err
		}
	}
	for _, it := range items {
		seq, err := q.Publish(ctx, it)
		if err != nil {
			return errors.Join(err, st.Save(dir))
		}
		st.setSeq(it.Requires, it.Block, seq)
	}
	return st.Save(dir)
}

func (st *State) setSeq(req Labels, block int, seq uint64) {
	for i := range st.Blocks {
		b := &st.Blocks[i]
		if b.Block == block && b.Requires.String() == req.String() {
			b.Seq = seq
			return
		}
	}
	st.Blocks = append(st.Blocks, BlockState{Requires: req, Block: block, Seq: seq})
}

// Sink is where a campaign keeps its collected blocks (its output folder).
type Sink interface {
	// Has reports whether a block's results are in the folder already.
	Has(req Labels, block int) bool
	// Store writes a committed block's results into the folder; the
	// block counts as collected once Store returns nil.
	Store(rec *Record, files Bundle) error
}

// Progress is what Drive reports after each collected or given-up block.
type Progress struct {
	Collected, GaveUp, Total int
	// Last is the block just collected (nil for a given-up one).
	Last *Record
}

// Drive collects the campaign's committed blocks that sink does not hold
// yet, each exactly once: only a block's record, which the first completed
// delivery created, names the object that is fetched. With wait it
// returns when every block is collected or given up, else once the blocks
// committed so far are in. Given-up blocks are recorded in st (saved in
// dir). On cancellation it returns ctx.Err() with what was collected kept.
func Drive(ctx context.Context, q *Queue, dir string, st *State, sink Sink, wait bool, progress func(Progress)) error {
	todo := map[string]*BlockState{}
	bySeq := map[uint64]*BlockState{}
	p := Progress{Total: len(st.Blocks)}
	for i := range st.Blocks {
		b := &st.Blocks[i]
		switch {
		case sink.Has(b.Requires, b.Block):
			p.Collected++
		case b.GaveUp != "":
			p.GaveUp++
		default:
			todo[BlockKey(st.Campaign, b.Requires, b.Block)] = b
			bySeq[b.Seq] = b
		}
	}
	if len(todo) == 0 {
		return nil
	}
	gaveUp := make(chan advisory, 16)
	if wait {
		sub, err := q.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+BlocksStream+".*", func(m *nats.Msg) {
			var a advisory
			if json.Unmarshal(m.Data, &a) == nil {
				select {
				case gaveUp <- a:
				default:
				}
			}
		})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrQueue, err)
		}
		defer sub.Unsubscribe()
	}
	w, err := q.done.Watch(ctx, st.Campaign+".>")
	if err != nil {
		return fmt.Errorf("%w: watch %s: %w", ErrQueue, DoneBucket, err)
	}
	defer w.Stop()
	var sweep <-chan time.Time
	if wait {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		sweep = t.C
	}
	idle := map[string]int{}
	giveUp := func(b *BlockState, why string) error {
		b.GaveUp = why
		delete(todo, BlockKey(st.Campaign, b.Requires, b.Block))
		p.GaveUp++
		p.Last = nil
		if err := st.Save(dir); err != nil {
			return err
		}
		if progress != nil {
			progress(p)
		}
		return nil
	}
	for len(todo) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case a := <-gaveUp:
			b := bySeq[a.StreamSeq]
			if b == nil || todo[BlockKey(st.Campaign, b.Requires, b.Block)] == nil {
				continue
			}
			if err := giveUp(b, fmt.Sprintf("given up after %d deliveries (its workers died or handed it back each time)", a.Deliveries)); err != nil {
				return err
			}
		case <-sweep:
			// A block given up while nobody listened to the advisory (a
			// detached campaign): its class has nothing left to deliver
			// or in flight, twice in a row, and it has no commit.
			for _, b := range q.stalled(ctx, todo, idle) {
				if err := giveUp(b, "no longer delivered: given up after its deliveries (its workers died or handed it back each time)"); err != nil {
					return err
				}
			}
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("%w: the watch of %s ended", ErrQueue, DoneBucket)
			}
			if e == nil { // the values that existed are all delivered
				if !wait {
					return nil
				}
				continue
			}
			b := todo[e.Key()]
			if b == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			rec, err := decodeRecord(e.Value())
			if err != nil {
				return err
			}
			if err := checkRecord(rec, st, b); err != nil {
				return err
			}
			files, err := q.Results(ctx, rec)
			if err != nil {
				return err
			}
			if err := sink.Store(rec, files); err != nil {
				return err
			}
			delete(todo, e.Key())
			p.Collected++
			p.Last = rec
			if progress != nil {
				progress(p)
			}
		}
	}
	st.CollectedAt = time.Now().UTC()
	return st.Save(dir)
}

// advisory is the part of JetStream's max-deliveries advisory Drive reads.
type advisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// checkRecord checks that a record under a block's key is that block's.
func checkRecord(rec *Record, st *State, b *BlockState) error {
	if rec.Campaign != st.Campaign || rec.Block != b.Block || rec.Requires.String() != b.Requires.String() || rec.Kind != st.Kind {
		return fmt.Errorf("%w: the record under block %d of class %s is for campaign %s, class %s, block %d (%s)",
			ErrItem, b.Block, ClassDir(b.Requires), rec.Campaign, ClassDir(rec.Requires), rec.Block, rec.Kind)
	}
	want := objectName(&Item{Campaign: rec.Campaign, Requires: rec.Requires, Block: rec.Block}, rec.Delivery)
	if rec.Object != want || !strings.HasPrefix(rec.Delivery, "s") {
		return fmt.Errorf("%w: block %d of class %s: object %q, want %q", ErrItem, b.Block, ClassDir(b.Requires), rec.Object, want)
	}
	return nil
}

// Missing lists the blocks neither collected nor given up, as
// "class/block" names, for messages.
func Missing(st *State, sink Sink) []string {
	var out []string
	for _, b := range st.Blocks {
		if b.GaveUp == "" && !sink.Has(b.Requires, b.Block) {
			out = append(out, ClassDir(b.Requires)+"/"+strconv.Itoa(b.Block))
		}
	}
	slices.Sort(out)
	return out
}

// sweepEvery is how often a waiting Drive looks for blocks that JetStream
// no longer delivers; two looks in a row must agree.
var sweepEvery = 10 * time.Second

// stalled returns the blocks of todo whose class consumer has nothing
// pending and nothing awaiting an acknowledgement on two looks in a row
// (idle counts the looks), and which have no commit: JetStream will not
// deliver them again.
func (q *Queue) stalled(ctx context.Context, todo map[string]*BlockState, idle map[string]int) []*BlockState {
	classes := map[string]Labels{}
	for _, b := range todo {
		classes[ClassToken(b.Requires)] = b.Requires
	}
	var out []*BlockState
	for tok, req := range classes {
		cons, err := q.stream.Consumer(ctx, ConsumerOf(req))
		if err != nil {
			continue
		}
		info, err := cons.Info(ctx)
		if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
			idle[tok] = 0
			continue
		}
		if idle[tok]++; idle[tok] < 2 {
			continue
		}
		for key, b := range todo {
			if ClassToken(b.Requires) != tok {
				continue
			}
			if rec, err := q.Committed(ctx, key); err == nil && rec == nil {
				out = append(out, b)
			}
		}
	}
	return out
}
