package ladder

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestRungFor(t *testing.T) {
	ladder := []int{1024, 2048, 4096, 8192}
	tests := []struct {
		name    string
		ladder  []int
		tokens  int
		wantIdx int
		wantOK  bool
	}{
		{name: "negative tokens", ladder: ladder, tokens: -1, wantIdx: -1},
		{name: "zero tokens fit the smallest", ladder: ladder, tokens: 0, wantIdx: 0, wantOK: true},
		{name: "one token", ladder: ladder, tokens: 1, wantIdx: 0, wantOK: true},
		{name: "one below the first capacity", ladder: ladder, tokens: 1023, wantIdx: 0, wantOK: true},
		{name: "exactly the first capacity", ladder: ladder, tokens: 1024, wantIdx: 0, wantOK: true},
		{name: "one past the first capacity rounds up", ladder: ladder, tokens: 1025, wantIdx: 1, wantOK: true},
		{name: "exactly the second", ladder: ladder, tokens: 2048, wantIdx: 1, wantOK: true},
		{name: "one past the second", ladder: ladder, tokens: 2049, wantIdx: 2, wantOK: true},
		{name: "one below the largest", ladder: ladder, tokens: 8191, wantIdx: 3, wantOK: true},
		{name: "exactly the largest", ladder: ladder, tokens: 8192, wantIdx: 3, wantOK: true},
		{name: "one past the largest", ladder: ladder, tokens: 8193, wantIdx: -1},
		{name: "empty ladder", ladder: nil, tokens: 1, wantIdx: -1},
		{name: "single rung", ladder: []int{16}, tokens: 16, wantIdx: 0, wantOK: true},
		{name: "unsorted ladder still picks the smallest fit", ladder: []int{4096, 1024, 2048}, tokens: 1500, wantIdx: 2, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx, ok := RungFor(tc.ladder, tc.tokens)
			if idx != tc.wantIdx || ok != tc.wantOK {
				t.Errorf("RungFor(%v, %d) = %d, %v; want %d, %v", tc.ladder, tc.tokens, idx, ok, tc.wantIdx, tc.wantOK)
			}
			if idx2, ok2 := Ladder(tc.ladder).RungFor(tc.tokens); idx2 != idx || ok2 != ok {
				t.Errorf("Ladder.RungFor disagrees with RungFor: %d, %v", idx2, ok2)
			}
		})
	}
}

func TestRungForPositionRule(t *testing.T) {
	// A token at position p needs capacity > p: position 1023 fits 1024,
	// position 1024 needs 2048.
	ladder := []int{1024, 2048}
	for _, tc := range []struct {
		pos, want int
	}{{0, 0}, {1023, 0}, {1024, 1}, {2047, 1}} {
		if idx, _ := RungFor(ladder, tc.pos+1); idx != tc.want {
			t.Errorf("position %d: rung %d, want %d", tc.pos, idx, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		ladder  []int
		wantErr string
	}{
		{name: "ok", ladder: []int{1024, 2048, 4096, 8192}},
		{name: "single", ladder: []int{64}},
		{name: "empty", ladder: nil, wantErr: "the ladder is empty"},
		{name: "zero", ladder: []int{0, 8}, wantErr: "ladder rung 0 is 0: capacities must be positive"},
		{name: "negative", ladder: []int{-8}, wantErr: "ladder rung 0 is -8: capacities must be positive"},
		{name: "duplicate", ladder: []int{8, 8}, wantErr: "ladder [8 8]: capacities must be strictly ascending"},
		{name: "descending", ladder: []int{16, 8}, wantErr: "ladder [16 8]: capacities must be strictly ascending"},
		{name: "too large", ladder: []int{16, MaxCapacity + 1}, wantErr: "ladder rung 1 is 16777217: capacities are limited to 16777216"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.ladder)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%v) = %v", tc.ladder, err)
				}
				if l, err := New(tc.ladder); err != nil || !slices.Equal(l, tc.ladder) {
					t.Errorf("New(%v) = %v, %v", tc.ladder, l, err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate(%v) = %v, want ErrInvalid %q", tc.ladder, err, tc.wantErr)
			}
			if _, err := New(tc.ladder); err == nil {
				t.Errorf("New(%v) accepted", tc.ladder)
			}
		})
	}
}

func TestNewCopies(t *testing.T) {
	caps := []int{8, 16}
	l, err := New(caps)
	if err != nil {
		t.Fatal(err)
	}
	caps[0] = 4
	if l[0] != 8 || l.Max() != 16 {
		t.Errorf("ladder %v changed with its input", l)
	}
}

// Every policy has one row, names a known store and schedule, and parses
// back from its name; the seed's four designs keep their seed names.
func TestPolicyTable(t *testing.T) {
	stores := []Store{StoreMax, StoreCopy, StoreRemap}
	schedules := []Schedule{UpFront, OneAhead, LazySchedule}
	seen := map[Policy]bool{}
	for _, r := range Rows {
		if seen[r.Policy] {
			t.Errorf("policy %s has two rows", r.Policy)
		}
		seen[r.Policy] = true
		if !slices.Contains(stores, r.Store) || !slices.Contains(schedules, r.Schedule) {
			t.Errorf("%s: store %q, schedule %q", r.Policy, r.Store, r.Schedule)
		}
		if p, err := Parse(string(r.Policy)); err != nil || p != r.Policy || p.Row() != r {
			t.Errorf("Parse(%q) = %q, %v", r.Policy, p, err)
		}
	}
	if !slices.Equal(Names(), []string{"direct", "pyramid", "grow-eager", "grow-one-ahead", "lazy", "grow-remap"}) {
		t.Errorf("names %v", Names())
	}
	for p, seed := range map[Policy]string{Direct: "B0", Pyramid: "B1", GrowEager: "I1", GrowOneAhead: "I2"} {
		if p.Row().Seed != seed {
			t.Errorf("%s: seed name %q, want %s", p, p.Row().Seed, seed)
		}
	}
	if _, err := Parse("eager"); err == nil {
		t.Error("Parse accepted an unknown policy")
	}
	l := Ladder{8, 16, 32}
	if got := Direct.Row().Rungs(l); !slices.Equal(got, Ladder{32}) {
		t.Errorf("direct compiles %v, want the largest rung", got)
	}
	if got := Pyramid.Row().Rungs(l); !slices.Equal(got, l) {
		t.Errorf("pyramid compiles %v, want every rung", got)
	}
	for p, want := range map[Policy]bool{GrowOneAhead: true, GrowRemap: true, Lazy: false, GrowEager: false} {
		if p.Background() != want {
			t.Errorf("%s.Background() = %v", p, !want)
		}
	}
}

// DueRungs launches a rung when its time left is within its predicted
// compile and the queue before it, plus the margin, and with it the rungs
// below it that are not launched. On 32/64/128 at 1 ms a step: from
// position 20 rung 64 (10 ms, 12 ms left) is due. Rung 128 (20 ms) is not
// while rung 64 compiles (the sequence will wait for it at 64, and rung
// 128 queues behind it); from rung 64 at position 39, 25 ms before the
// sequence needs it, it is.
func TestDueRungs(t *testing.T) {
	caps := []int{32, 64, 128}
	compile := map[int]float64{1: 0.010, 2: 0.020}
	launched := map[int]bool{}
	predict := func(j int, _ float64) float64 { return compile[j] }
	isLaunched := func(j int) bool { return launched[j] }
	if got := DueRungs(caps, 0, 19, 1<<30, 0.001, 0, isLaunched, predict); len(got) != 0 {
		t.Fatalf("at position 19: %+v, want nothing due (13 ms left for a 12.5 ms need)", got)
	}
	got := DueRungs(caps, 0, 20, 1<<30, 0.001, 0, isLaunched, predict)
	if len(got) != 1 || got[0].Rung != 1 || math.Abs(got[0].LeftS-0.012) > 1e-9 || got[0].AheadS != 0 {
		t.Fatalf("at position 20: %+v, want rung 1 with 12 ms left", got)
	}
	launched[1] = true
	for pos := 21; pos < 30; pos++ { // rung 64 compiling, 10 ms from position 20
		if got := DueRungs(caps, 0, pos, 1<<30, 0.001, 0.010-float64(pos-20)*0.001, isLaunched, predict); len(got) != 0 {
			t.Fatalf("at position %d: %+v, want nothing due", pos, got)
		}
	}
	if got := DueRungs(caps, 1, 38, 1<<30, 0.001, 0, isLaunched, predict); len(got) != 0 {
		t.Fatalf("on rung 64 at position 38: %+v, want nothing due (26 ms left)", got)
	}
	got = DueRungs(caps, 1, 39, 1<<30, 0.001, 0, isLaunched, predict)
	if len(got) != 1 || got[0].Rung != 2 || math.Abs(got[0].OverlapS()-0.025) > 1e-9 {
		t.Fatalf("on rung 64 at position 39: %+v, want rung 128 with 25 ms of overlap", got)
	}
	// A sequence that ends within rung 32 (28 tokens) launches nothing,
	// one that ends within 64 never rung 128.
	if got := DueRungs(caps, 0, 31, 28, 0.001, 0, func(int) bool { return false }, predict); len(got) != 0 {
		t.Fatalf("a sequence of 28 tokens: %+v, want nothing", got)
	}
	if got := DueRungs(caps, 0, 31, 64, 0.001, 0, func(int) bool { return false }, predict); len(got) != 1 || got[0].Rung != 1 {
		t.Fatalf("a sequence of 64 tokens: %+v, want rung 64 alone", got)
	}
	launched = map[int]bool{}
	compile[2] = 0.5 // far too long: due at once, and rung 1 with it
	got = DueRungs(caps, 0, 5, 1<<30, 0.001, 0, isLaunched, predict)
	if len(got) != 2 || got[0].Rung != 1 || got[1].Rung != 2 || got[1].AheadS != 0.010 {
		t.Fatalf("a 0.5 s rung 2: %+v, want rungs 1 and 2, 2 queued behind 1", got)
	}
	// Rung 64 ready at 10 ms, the sequence there at 27 ms: no wait, so
	// rung 128 is needed 27 + 32 ms from now and overlaps 49 ms of it.
	if math.Abs(got[1].LeftS-0.059) > 1e-9 || math.Abs(got[1].OverlapS()-0.049) > 1e-9 {
		t.Errorf("rung 2 %+v, want 59 ms left and 49 ms of overlap", got[1])
	}
}
