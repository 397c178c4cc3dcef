package traffic

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
)

func TestDraw(t *testing.T) {
	m := Mix{Rate: 4, Requests: 4000, Prompt: []int{16, 128}, Answer: []int{8, 64, 256}, Seed: 3}
	a, err := Draw(m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Draw(m)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same mix drew different requests")
	}
	seen := map[[2]int]bool{}
	for i, r := range a {
		if i > 0 && r.AtS < a[i-1].AtS {
			t.Fatalf("request %d arrives at %v, before %v", i, r.AtS, a[i-1].AtS)
		}
		if !slices.Contains(m.Prompt, r.Prompt) || !slices.Contains(m.Answer, r.Answer) {
			t.Fatalf("request %d: %+v is not from the mix", i, r)
		}
		seen[[2]int{r.Prompt, r.Answer}] = true
	}
	if len(seen) != 6 {
		t.Errorf("%d of the 6 prompt/answer pairs drawn in 4000 requests", len(seen))
	}
	// 4000 exponential gaps of mean 0.25 s: the sum is within 5% of 1000 s
	// (its standard deviation is 1.6%).
	if last := a[len(a)-1].AtS; math.Abs(last-1000) > 50 {
		t.Errorf("4000 arrivals at 4/s end at %.1f s, want about 1000", last)
	}
	m.Seed = 4
	if c, _ := Draw(m); reflect.DeepEqual(a, c) {
		t.Error("seeds 3 and 4 drew the same requests")
	}
	m.Rate = 0
	c, _ := Draw(m)
	for _, r := range c {
		if r.AtS != 0 {
			t.Fatalf("rate 0 sends at %v, want every request at 0", r.AtS)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []Mix{
		{Rate: math.NaN(), Requests: 1, Prompt: []int{1}, Answer: []int{1}},
		{Rate: -1, Requests: 1, Prompt: []int{1}, Answer: []int{1}},
		{Rate: math.Inf(1), Requests: 1, Prompt: []int{1}, Answer: []int{1}},
		{Requests: 0, Prompt: []int{1}, Answer: []int{1}},
		{Requests: MaxRequests + 1, Prompt: []int{1}, Answer: []int{1}},
		{Requests: 1, Answer: []int{1}},
		{Requests: 1, Prompt: []int{1}, Answer: []int{0}},
	} {
		if _, err := Draw(tc); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: error %v, want ErrInvalid", tc, err)
		}
	}
}

func TestPromptIDs(t *testing.T) {
	a, b := PromptIDs(1, 5, 300), PromptIDs(1, 5, 300)
	if len(a) != 300 || !slices.Equal(a, b) {
		t.Fatal("the same seed and index drew different prompts")
	}
	for _, id := range a {
		if id < MinID || id >= MaxID {
			t.Fatalf("id %d outside [%d, %d)", id, MinID, MaxID)
		}
	}
	if slices.Equal(a, PromptIDs(1, 6, 300)) {
		t.Error("requests 5 and 6 drew the same prompt")
	}
}
