package campaignq

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRequirementMatching(t *testing.T) {
	for _, tc := range []struct {
		name, requires, labels string
		met                    bool
	}{
		{"no requirement, any machine", "", "device=NPU", true},
		{"no requirement, unlabelled machine", "", "", true},
		{"equal", "device=NPU,driver=31.0", "driver=31.0,device=NPU", true},
		{"superset of labels", "device=NPU", "device=NPU,driver=31.0,host=a", true},
		{"other value", "device=NPU,driver=31.0", "device=NPU,driver=32.0", false},
		{"missing key", "device=NPU,driver=31.0", "device=NPU", false},
		{"case matters", "device=NPU", "device=npu", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseLabels(tc.requires)
			if err != nil {
				t.Fatal(err)
			}
			have, err := ParseLabels(tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			if got := req.MetBy(have); got != tc.met {
				t.Errorf("%q met by %q: %v, want %v", tc.requires, tc.labels, got, tc.met)
			}
		})
	}
}

func TestParseLabelsRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"no value", "device"},
		{"empty value", "device="},
		{"twice", "device=NPU,device=CPU"},
		{"dot in subject-unsafe place is fine but space is not", "device=N PU"},
		{"slash would make a path", "driver=a/b"},
		{"wildcard", "device=*"},
		{"key starts with a digit", "1x=2"},
		{"empty part", "device=NPU,,driver=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseLabels(tc.in); err == nil {
				t.Errorf("ParseLabels(%q) accepted", tc.in)
			}
		})
	}
}

func TestClassTokenRoundTripsAndIsASubjectToken(t *testing.T) {
	for _, s := range []string{"", "device=NPU", "device=NPU,driver=31.0.101.5590", "b=1,a=2", "x=a+b:c_d-e"} {
		req, err := ParseLabels(s)
		if err != nil {
			t.Fatal(err)
		}
		tok := ClassToken(req)
		if tok == "" || strings.ContainsAny(tok, ".*> \t") {
			t.Errorf("%q: token %q is not one subject token", s, tok)
		}
		back, err := ParseClassToken(tok)
		if err != nil || back.String() != req.String() {
			t.Errorf("%q: token %q reads back as %q, %v", s, tok, back, err)
		}
		if d := ClassDir(req); d == "" || strings.Contains(d, "/") {
			t.Errorf("%q: class folder %q", s, d)
		}
	}
	if _, err := ParseClassToken("ZGV2aWNlPU5QVSxhPTE"); err == nil { // "device=NPU,a=1", not sorted
		t.Error("a token of a non-canonical requirement was accepted")
	}
}

func testItem() *Item {
	return &Item{Version: ItemVersion, Kind: KindBench, Campaign: NewCampaignID(time.Date(2026, 12, 5, 23, 19, 0, 0, time.UTC), 0x3fa2b1c4),
		Requires: Labels{"device": "NPU", "driver": "X"}, Block: 3, Payload: json.RawMessage(`{"pair":3}`)}
}

func TestItemEncodingRoundTrips(t *testing.T) {
	it := testItem()
	if it.Campaign != "20261205-231900-3fa2b1c4" {
		t.Errorf("campaign id %q", it.Campaign)
	}
	b, err := it.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeItem(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Key() != it.Key() || back.Subject() != it.Subject() || string(back.Payload) != string(it.Payload) || back.Kind != it.Kind {
		t.Errorf("round trip: %+v, want %+v", back, it)
	}
	if want := "20261205-231900-3fa2b1c4." + ClassToken(it.Requires) + ".3"; it.Key() != want {
		t.Errorf("key %q, want %q", it.Key(), want)
	}
	if it.Subject() != "ovrun.blocks."+ClassToken(it.Requires) {
		t.Errorf("subject %q", it.Subject())
	}
}

func TestDecodeItemRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(m map[string]any)
	}{
		{"another version", func(m map[string]any) { m["version"] = 2 }},
		{"unknown kind", func(m map[string]any) { m["kind"] = "shell" }},
		{"campaign id with a dot", func(m map[string]any) { m["campaign"] = "a.b" }},
		{"block 0", func(m map[string]any) { m["block"] = 0 }},
		{"no payload", func(m map[string]any) { delete(m, "payload") }},
		{"bad requirement", func(m map[string]any) { m["requires"] = map[string]string{"device": "a b"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(testItem())
			var m map[string]any
			json.Unmarshal(b, &m)
			tc.change(m)
			b, _ = json.Marshal(m)
			if _, err := DecodeItem(b); !errors.Is(err, ErrItem) {
				t.Errorf("DecodeItem: %v, want ErrItem", err)
			}
		})
	}
	if _, err := DecodeItem([]byte("{")); !errors.Is(err, ErrItem) {
		t.Errorf("truncated JSON: %v", err)
	}
}

func TestBundleRefusesPathsOutsideItsFolder(t *testing.T) {
	for _, p := range []string{"../x", "/etc/passwd", "runs/../../x", "a//b", "", "./a", "a\\b"} {
		if err := (Bundle{p: nil}).Check(); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	if err := (Bundle{"runs/01-1-a.json": nil, "block.json": nil}).Check(); err != nil {
		t.Error(err)
	}
}
