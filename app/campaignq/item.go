package campaignq

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Item is one block of a campaign: the work item a worker pulls. It holds
// the whole block, so that a worker needs nothing else to run it.
type Item struct {
	// Version is ItemVersion; a worker refuses items of another version.
	Version int `json:"version"`
	// Kind names the Runner that runs the block: "bench" (ovrun bench)
	// or "ab" (ovtrace ab).
	Kind string `json:"kind"`
	// Campaign is the campaign's id (NewCampaignID).
	Campaign string `json:"campaign"`
	// Requires is the block's requirement class: what the labels of the
	// machine that runs it must hold.
	Requires Labels `json:"requires"`
	// Block is the block's number within its class, from 1.
	Block int `json:"block"`
	// Payload is the block in its kind's own form: the campaign's
	// settings, the arms in the block's order, the warm-ups, the run flags.
	Payload json.RawMessage `json:"payload"`
}

// ItemVersion is the Item format this build writes and reads.
const ItemVersion = 1

// The kinds of items.
const (
	KindBench = "bench"
	KindAB    = "ab"
)

// ErrItem: a work item that does not decode or check out.
var ErrItem = errors.New("bad work item")

var campaignID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// NewCampaignID is a campaign id: the UTC time and random hex, e.g.
// 20261205-231900-3fa2b1c4 (letters, digits and '-', a valid key token).
func NewCampaignID(now time.Time, random uint32) string {
	return fmt.Sprintf("%s-%08x", now.UTC().Format("20060102-150405"), random)
}

// Check reports what is wrong with an item, wrapping ErrItem.
func (it *Item) Check() error {
	switch {
	case it.Version != ItemVersion:
		return fmt.Errorf("%w: version %d, this build reads %d", ErrItem, it.Version, ItemVersion)
	case it.Kind != KindBench && it.Kind != KindAB:
		return fmt.Errorf("%w: kind %q", ErrItem, it.Kind)
	case !campaignID.MatchString(it.Campaign):
		return fmt.Errorf("%w: campaign id %q", ErrItem, it.Campaign)
	case it.Block < 1:
		return fmt.Errorf("%w: block %d", ErrItem, it.Block)
	case len(it.Payload) == 0:
		return fmt.Errorf("%w: no payload", ErrItem)
	}
	if _, err := ParseLabels(it.Requires.String()); err != nil {
		return fmt.Errorf("%w: requires: %w", ErrItem, err)
	}
	return nil
}

// Encode is the message body of an item.
func (it *Item) Encode() ([]byte, error) {
	if err := it.Check(); err != nil {
		return nil, err
	}
	return json.Marshal(it)
}

// DecodeItem reads and checks a message body.
func DecodeItem(b []byte) (*Item, error) {
	it := new(Item)
	if err := json.Unmarshal(b, it); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrItem, err)
	}
	if it.Requires == nil {
		it.Requires = Labels{}
	}
	if err := it.Check(); err != nil {
		return nil, err
	}
	return it, nil
}

// Subject is the subject the item is published on: its class's.
func (it *Item) Subject() string { return SubjectOf(it.Requires) }

// Key is the block's key in DoneBucket: campaign.class.block.
func (it *Item) Key() string { return BlockKey(it.Campaign, it.Requires, it.Block) }

// BlockKey is the DoneBucket key of a block.
func BlockKey(campaign string, req Labels, block int) string {
	return campaign + "." + ClassToken(req) + "." + strconv.Itoa(block)
}

// MsgID is the item's Nats-Msg-Id: JetStream drops a second publish of the
// same block within the stream's duplicate window.
func (it *Item) MsgID() string { return it.Key() }

// Record is what a worker commits for a block under its key: which
// delivery's results count, and where they came from.
type Record struct {
	Campaign string `json:"campaign"`
	Requires Labels `json:"requires"`
	Block    int    `json:"block"`
	Kind     string `json:"kind"`
	// Delivery names the attempt: "s<stream sequence>-d<delivery count>".
	Delivery string `json:"delivery"`
	// Deliveries is JetStream's delivery count of the message when this
	// attempt took it: 1 for a block run by the first worker that took it.
	Deliveries uint64 `json:"deliveries"`
	// Object is the result files' object in ResultsStore.
	Object string `json:"object"`
	// Worker, Host and Labels are the worker that ran the block.
	Worker string `json:"worker"`
	Host   string `json:"host"`
	Labels Labels `json:"labels"`
	// Machine is the worker machine's description (bench.Machine).
	Machine    json.RawMessage `json:"machine,omitempty"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	// WallS is the block's wall time on the worker, warm-ups included.
	WallS float64 `json:"wall_s"`
}

// objectName is where a delivery's result files go: campaign, class, block
// and delivery, so that no two attempts share an object.
func objectName(it *Item, delivery string) string {
	return path.Join(it.Campaign, ClassToken(it.Requires), strconv.Itoa(it.Block), delivery)
}

// Bundle is a block's result files by relative path, stored as one object.
type Bundle map[string][]byte

// Bundle limits: what a campaign accepts from a worker.
const (
	maxBundleFiles = 10000
	maxBundleBytes = 1 << 30
)

// Check refuses paths that would leave the folder they are written into.
func (b Bundle) Check() error {
	if len(b) > maxBundleFiles {
		return fmt.Errorf("%d result files, more than %d", len(b), maxBundleFiles)
	}
	for p := range b {
		if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") || strings.ContainsAny(p, "\\\x00") {
			return fmt.Errorf("result file %q: not a clean relative path", p)
		}
	}
	return nil
}

func decodeBundle(b []byte) (Bundle, error) {
	var out Bundle
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("result bundle: %w", err)
	}
	return out, out.Check()
}
