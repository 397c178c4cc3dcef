package campaignq

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Labels are a machine's KEY=VALUE properties (a worker's --labels), or
// the properties a block requires of its machine (a campaign's --requires).
type Labels map[string]string

// ErrLabels: a --labels or --requires value that does not parse.
var ErrLabels = errors.New("want KEY=VALUE[,KEY=VALUE...]")

var (
	labelKey   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)
	labelValue = regexp.MustCompile(`^[A-Za-z0-9_.:+-]+$`)
)

// ParseLabels reads KEY=VALUE pairs separated by commas ("" is no label).
// Keys start with a letter; keys and values hold letters, digits and
// "_.-" (values also ":+"); a key appears once.
func ParseLabels(s string) (Labels, error) {
	l := Labels{}
	if strings.TrimSpace(s) == "" {
		return l, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok || !labelKey.MatchString(k) || !labelValue.MatchString(v):
			return nil, fmt.Errorf("%q: part %q: %w (letters, digits and _.- in keys, also :+ in values)", s, part, ErrLabels)
		case l[k] != "":
			return nil, fmt.Errorf("%q: %s given twice", s, k)
		}
		l[k] = v
	}
	return l, nil
}

// String is the canonical form: KEY=VALUE pairs sorted by key, joined by
// commas; "" for no label.
func (l Labels) String() string {
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// MetBy reports whether a machine with labels have meets the requirement
// l: every required key is present with the required value. No
// requirement is met by every machine.
func (l Labels) MetBy(have Labels) bool {
	for k, v := range l {
		if have[k] != v {
			return false
		}
	}
	return true
}

// classAny is the subject token of the class that requires nothing.
const classAny = "any"

// ClassToken is the subject token and consumer-name part of a requirement
// class: "any" for none, else the canonical form in unpadded base64url,
// which holds no '.', '*', '>' or space (base64 of three or more bytes is
// never "any").
func ClassToken(req Labels) string {
	s := req.String()
	if s == "" {
		return classAny
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// ParseClassToken inverts ClassToken.
func ParseClassToken(tok string) (Labels, error) {
	if tok == classAny {
		return Labels{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, fmt.Errorf("class token %q: %w", tok, err)
	}
	l, err := ParseLabels(string(b))
	if err != nil {
		return nil, err
	}
	if l.String() != string(b) {
		return nil, fmt.Errorf("class token %q: %q is not canonical", tok, b)
	}
	return l, nil
}

// ClassDir is a file name for a requirement class: its canonical form, or
// "any" for none. Labels hold no '/', so the name is one path element, and
// a canonical form holds '=', so no class is named "any".
func ClassDir(req Labels) string {
	if s := req.String(); s != "" {
		return s
	}
	return classAny
}

// ParseClasses reads a campaign's --requires values, one requirement class
// each; none is one class that every worker meets.
func ParseClasses(vals []string) ([]Labels, error) {
	if len(vals) == 0 {
		return []Labels{{}}, nil
	}
	var out []Labels
	seen := map[string]bool{}
	for _, v := range vals {
		l, err := ParseLabels(v)
		if err != nil {
			return nil, fmt.Errorf("--requires %w", err)
		}
		if seen[l.String()] {
			return nil, fmt.Errorf("--requires %s: the class is given twice", v)
		}
		seen[l.String()] = true
		out = append(out, l)
	}
	return out, nil
}
