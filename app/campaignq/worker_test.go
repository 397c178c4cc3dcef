package campaignq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/app/campaignq/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeRunner writes out/result.txt naming its worker. hold, when set,
// is called before a block finishes (to stall it).
type fakeRunner struct {
	name string
	hold func(ctx context.Context, b *Block)
}

func (r *fakeRunner) RunBlock(ctx context.Context, b *Block) error {
	if r.hold != nil {
		r.hold(ctx, b)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return os.WriteFile(filepath.Join(b.Out, "result.txt"), []byte(r.name), 0o644)
}

// memSink keeps collected blocks in memory and counts the stores.
type memSink struct {
	mu     sync.Mutex
	stored map[string]Bundle
	recs   map[string]*Record
	stores map[string]int
}

func newMemSink() *memSink {
	return &memSink{stored: map[string]Bundle{}, recs: map[string]*Record{}, stores: map[string]int{}}
}

func sinkKey(req Labels, block int) string { return fmt.Sprintf("%s/%d", ClassDir(req), block) }

func (s *memSink) Has(req Labels, block int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.stored[sinkKey(req, block)]
	return ok
}

func (s *memSink) Store(rec *Record, files Bundle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sinkKey(rec.Requires, rec.Block)
	s.stored[k], s.recs[k] = files, rec
	s.stores[k]++
	return nil
}

// TestWorkersCountEachBlockOnce runs two classes of blocks on three
// workers of two label sets. Worker a1 takes its first block and stalls
// without heartbeats (as a worker cut off from the server, or killed): the
// block is redelivered to a2, which completes it first; when a1 finishes
// after all, its results are dropped and its object deleted. Every block
// is collected exactly once, by a worker whose labels meet its class, and
// a second collection adds nothing.
func TestWorkersCountEachBlockOnce(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	campaignQ := open(t, ctx, url)
	classA, _ := ParseLabels("device=CPU,driver=a")
	classB, _ := ParseLabels("device=CPU,driver=b")
	st := &State{Kind: KindBench, Campaign: "test-campaign", Classes: []Labels{classA, classB}}
	var items []*Item
	for _, req := range st.Classes {
		for b := 1; b <= 3; b++ {
			items = append(items, &Item{Version: ItemVersion, Kind: KindBench, Campaign: st.Campaign, Requires: req, Block: b,
				Payload: json.RawMessage(fmt.Sprintf(`{"block":%d}`, b))})
		}
	}
	dir := t.TempDir()

	// a1 alone first, so that it certainly takes a block and stalls.
	stalled := make(chan *Block, 1)
	a1Runner := &fakeRunner{name: "a1"}
	var stallOnce sync.Once
	a1Runner.hold = func(ctx context.Context, b *Block) {
		first := false
		stallOnce.Do(func() { first = true })
		if !first {
			return
		}
		stalled <- b
		// Stalled until another delivery has committed this block.
		for ctx.Err() == nil {
			if rec, _ := campaignQ.Committed(ctx, b.Item.Key()); rec != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := Publish(ctx, campaignQ, dir, st, items, time.Second); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	dropped := make(chan string, 1)
	start := func(name, labels string, r Runner, heartbeat time.Duration) {
		l, err := ParseLabels(labels)
		if err != nil {
			t.Fatal(err)
		}
		w := &Worker{Queue: open(t, ctx, url), Name: name, Host: "test", Labels: l, Dir: filepath.Join(dir, "work-"+name),
			Runners: map[string]Runner{KindBench: r}, Poll: 200 * time.Millisecond, Relist: 200 * time.Millisecond,
			Heartbeat: heartbeat, handback: 100 * time.Millisecond,
			Log: func(f string, a ...any) {
				line := fmt.Sprintf(f, a...)
				t.Logf("%s: %s", name, line)
				if strings.Contains(line, "another delivery completed it first") {
					dropped <- name
				}
			}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx); !errors.Is(err, context.Canceled) {
				t.Errorf("worker %s: %v", name, err)
			}
		}()
	}
	// a1's heartbeats come far too late: its block times out after 1 s.
	start("a1", "device=CPU,driver=a", a1Runner, time.Hour)
	var victim *Block
	select {
	case victim = <-stalled:
	case <-ctx.Done():
		t.Fatal("a1 never took a block")
	}
	start("a2", "device=CPU,driver=a,host=two", &fakeRunner{name: "a2"}, 0)
	start("b1", "device=CPU,driver=b", &fakeRunner{name: "b1"}, 0)

	sink := newMemSink()
	if err := Drive(ctx, campaignQ, dir, st, sink, true, nil); err != nil {
		t.Fatal(err)
	}
	// a1 comes back, finishes, and finds the block taken.
	select {
	case name := <-dropped:
		if name != "a1" {
			t.Errorf("%s dropped its results, want a1", name)
		}
	case <-ctx.Done():
		t.Fatal("the stalled delivery never finished")
	}
	if _, err := campaignQ.results.GetInfo(ctx, objectName(victim.Item, victim.Delivery)); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the stalled delivery's object: %v, want it deleted", err)
	}
	stopWorkers()
	wg.Wait()

	if len(sink.stored) != len(items) {
		t.Fatalf("collected %d blocks, want %d", len(sink.stored), len(items))
	}
	for k, n := range sink.stores {
		if n != 1 {
			t.Errorf("block %s stored %d times", k, n)
		}
	}
	for k, rec := range sink.recs {
		by := string(sink.stored[k]["result.txt"])
		if by != rec.Worker {
			t.Errorf("block %s: record says %s, files say %s", k, rec.Worker, by)
		}
		if !rec.Requires.MetBy(rec.Labels) {
			t.Errorf("block %s of class %s ran on %s (%s)", k, ClassDir(rec.Requires), rec.Worker, rec.Labels)
		}
	}
	vk := sinkKey(victim.Item.Requires, victim.Item.Block)
	if rec := sink.recs[vk]; rec.Worker != "a2" || rec.Deliveries < 2 || rec.Delivery == victim.Delivery {
		t.Errorf("stalled block %s: worker %s, delivery %s (%d deliveries); want a2's redelivery", vk, rec.Worker, rec.Delivery, rec.Deliveries)
	}
	// Collecting again finds nothing new.
	if err := Drive(ctx, campaignQ, dir, st, sink, true, nil); err != nil {
		t.Fatal(err)
	}
	for k, n := range sink.stores {
		if n != 1 {
			t.Errorf("after a second collection block %s stored %d times", k, n)
		}
	}
	if back, err := LoadState(dir); err != nil || len(back.Blocks) != len(items) || back.Blocks[0].Seq == 0 {
		t.Errorf("queue.json: %+v, %v", back, err)
	}
}

// TestDriveIgnoresUncommittedObjects: a delivery that stored its object
// but died before its commit (no record) is never collected, and the
// block counts once it is committed.
func TestDriveIgnoresUncommittedObjects(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := open(t, ctx, url)
	req, _ := ParseLabels("device=CPU")
	it := &Item{Version: ItemVersion, Kind: KindBench, Campaign: "half", Requires: req, Block: 1, Payload: json.RawMessage(`{}`)}
	st := &State{Kind: KindBench, Campaign: "half", Classes: []Labels{req}, Blocks: []BlockState{{Requires: req, Block: 1, Seq: 1}}}
	half, _ := json.Marshal(Bundle{"result.txt": []byte("half")})
	if _, err := q.results.PutBytes(ctx, objectName(it, "s1-d1"), half); err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	if err := Drive(ctx, q, t.TempDir(), st, sink, false, nil); err != nil {
		t.Fatal(err)
	}
	if len(sink.stored) != 0 {
		t.Fatalf("an uncommitted delivery was collected: %v", sink.stored)
	}
	whole, _ := json.Marshal(Bundle{"result.txt": []byte("whole")})
	rec := &Record{Campaign: "half", Requires: req, Block: 1, Kind: KindBench, Delivery: "s1-d2", Deliveries: 2, Object: objectName(it, "s1-d2")}
	if _, err := q.results.PutBytes(ctx, rec.Object, whole); err != nil {
		t.Fatal(err)
	}
	rb, _ := json.Marshal(rec)
	if _, err := q.done.Create(ctx, it.Key(), rb); err != nil {
		t.Fatal(err)
	}
	if _, err := q.done.Create(ctx, it.Key(), rb); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("a second commit of the block: %v, want ErrKeyExists", err)
	}
	if err := Drive(ctx, q, t.TempDir(), st, sink, true, nil); err != nil {
		t.Fatal(err)
	}
	if got := string(sink.stored[sinkKey(req, 1)]["result.txt"]); got != "whole" || sink.stores[sinkKey(req, 1)] != 1 {
		t.Errorf("collected %q (%d stores), want the committed delivery's once", got, sink.stores[sinkKey(req, 1)])
	}
}

func open(t *testing.T, ctx context.Context, url string) *Queue {
	t.Helper()
	q, err := Open(ctx, url, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// cannotRunner hands every block back.
type cannotRunner struct{}

func (cannotRunner) RunBlock(context.Context, *Block) error {
	return fmt.Errorf("%w: no model here", ErrCannotRun)
}

// TestBlockNoWorkerCanRunIsGivenUp: a block every worker hands back is
// delivered MaxDeliver times and then reported as given up, both to a
// campaign waiting at the time (the advisory) and to one that collects
// later (the sweep of a class with nothing left to deliver).
func TestBlockNoWorkerCanRunIsGivenUp(t *testing.T) {
	defer func(d time.Duration) { sweepEvery = d }(sweepEvery)
	for _, tc := range []struct {
		name     string
		listened bool
		sweep    time.Duration
		why      string
	}{
		{"waiting campaign hears the advisory", true, time.Hour, fmt.Sprintf("given up after %d deliveries", MaxDeliver)},
		{"detached campaign finds the class idle", false, 100 * time.Millisecond, "no longer delivered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sweepEvery = tc.sweep
			url := natstest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			q := open(t, ctx, url)
			req, _ := ParseLabels("device=NPU")
			st := &State{Kind: KindBench, Campaign: "poison", Classes: []Labels{req}}
			it := &Item{Version: ItemVersion, Kind: KindBench, Campaign: "poison", Requires: req, Block: 1, Payload: json.RawMessage(`{}`)}
			dir := t.TempDir()
			if err := Publish(ctx, q, dir, st, []*Item{it}, time.Second); err != nil {
				t.Fatal(err)
			}
			var handedBack atomic.Int32
			w := &Worker{Queue: open(t, ctx, url), Name: "w", Labels: req, Dir: t.TempDir(), Runners: map[string]Runner{KindBench: cannotRunner{}},
				Poll: 100 * time.Millisecond, Relist: 100 * time.Millisecond, handback: 50 * time.Millisecond,
				Log: func(f string, a ...any) {
					if strings.Contains(f, "handed back") {
						handedBack.Add(1)
					}
				}}
			wctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(wctx) }()
			defer func() { stop(); <-done }()
			if !tc.listened {
				// Until JetStream has given up: nothing left to deliver.
				cons, err := q.stream.Consumer(ctx, ConsumerOf(req))
				if err != nil {
					t.Fatal(err)
				}
				for ctx.Err() == nil {
					if info, err := cons.Info(ctx); err == nil && handedBack.Load() == MaxDeliver && info.NumPending == 0 && info.NumAckPending == 0 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			var last Progress
			if err := Drive(ctx, q, dir, st, newMemSink(), true, func(p Progress) { last = p }); err != nil {
				t.Fatal(err)
			}
			if last.GaveUp != 1 || last.Collected != 0 || !strings.Contains(st.Blocks[0].GaveUp, tc.why) {
				t.Errorf("progress %+v, block %+v", last, st.Blocks[0])
			}
			if n := handedBack.Load(); n != MaxDeliver {
				t.Errorf("handed back %d times, want MaxDeliver = %d", n, MaxDeliver)
			}
			if back, err := LoadState(dir); err != nil || back.Blocks[0].GaveUp == "" {
				t.Errorf("queue.json does not record the given-up block: %+v, %v", back, err)
			}
		})
	}
}
