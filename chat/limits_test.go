package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Hostile templates each stop at their limit with a one-line error that
// names it, the process lives on, and the next render is right.
func TestHostileTemplatesAreRefused(t *testing.T) {
	deepParens := "{{ " + strings.Repeat("(", MaxTemplateBytes/2-8) + "1" + strings.Repeat(")", MaxTemplateBytes/2-8) + " }}"
	for _, tc := range []struct {
		name, src string
		want      *LimitError
	}{
		{"recursive macro", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, errRecursion},
		{"mutually recursive macros", `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, errRecursion},
		{"range(10**9)", `{% for i in range(10**9) %}x{% endfor %}`, errRange},
		{"range to the largest integer", `{% for i in range(-9223372036854775807, 9223372036854775807) %}x{% endfor %}`, errRange},
		{"string product", `{{ 'a' * 1000000000 }}`, errMemory},
		{"nested loops over range", `{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}`, errRange},
		{"nested loops over a string", `{% set s = 'a' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}`, errTime},
		{"huge output", `{% for i in range(2000) %}{{ 'a' * 10000 }}{% endfor %}`, errOutput},
		{"parentheses a million deep", deepParens, errRecursion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Compile(tc.src, "", "")
			t.Logf("refused in %v: %v", time.Since(start).Round(time.Millisecond), err)
			var le *LimitError
			if !errors.As(err, &le) || le != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "chat template: ") || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line starting with the template", msg)
			}
			assertRendersChatML(t)
		})
	}
}

// assertRendersChatML checks that an ordinary render still gives the
// right text.
func assertRendersChatML(t *testing.T) {
	t.Helper()
	tmpl, err := Compile(ChatML, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(context.Background(), []Message{{"user", "Hi"}}, true)
	if want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"; err != nil || got != want {
		t.Fatalf("ChatML after: %q, %v; want %q", got, err, want)
	}
}

// bomb is a template that is ordinary until the last message says which
// limit to run into: Compile's probes pass it, renders must stop it.
const bomb = `{% macro f() %}{{ f() }}{% endmacro %}{% set c = messages[-1]['content'] %}` +
	`{% if c == 'recurse' %}{{ f() }}{% elif c == 'memory' %}{{ 'a' * 1000000000 }}` +
	`{% elif c == 'spin' %}{% set s = 'a' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}` +
	`{% elif c == 'range' %}{{ range(10**9)|length }}{% elif c == 'panic' %}{{ 'a' * -1 }}` +
	`{% else %}{{ c }}{% endif %}`

func TestLimitsHoldOnEveryRender(t *testing.T) {
	tmpl, err := Compile(bomb, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		content string
		want    *LimitError
	}{{"recurse", errRecursion}, {"memory", errMemory}, {"spin", errTime}, {"range", errRange}} {
		start := time.Now()
		_, err := tmpl.Render(context.Background(), []Message{{"user", tc.content}}, true)
		t.Logf("%s: %v after %v", tc.content, err, time.Since(start).Round(time.Millisecond))
		var le *LimitError
		if !errors.As(err, &le) || le != tc.want || !strings.HasPrefix(err.Error(), "chat template: render failed: ") {
			t.Errorf("%s: error %v, want %q", tc.content, err, tc.want)
		}
		if got, err := tmpl.Render(context.Background(), []Message{{"user", "fine"}}, true); err != nil || got != "fine" {
			t.Errorf("after %s: %q, %v", tc.content, got, err)
		}
	}
	// A panic in the library is the template's error, not a crash.
	_, err = tmpl.Render(context.Background(), []Message{{"user", "panic"}}, true)
	var le *LimitError
	if err == nil || errors.As(err, &le) || !strings.Contains(err.Error(), "negative Repeat count") {
		t.Errorf("panic: %v", err)
	}
}

// A cancelled render ends with the context's error, before the timeout,
// and leaves the renderer working.
func TestRenderHonoursContext(t *testing.T) {
	tmpl, err := Compile(bomb, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := tmpl.Render(ctx, []Message{{"user", "spin"}}, true); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := tmpl.Render(ctx, []Message{{"user", "spin"}}, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if _, err := CompileContext(ctx, "{{ 1 }}", "", ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("compile with a done context: %v", err)
	}
	assertRendersChatML(t)
}

// Templates that refuse a system turn, or fail on every probe with their
// own error, are the template's business: Compile takes them.
func TestProbeTakesTheTemplatesOwnErrors(t *testing.T) {
	for _, src := range []string{
		`{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}` +
			`{% for m in messages %}{{ m['content'] }}{% endfor %}`,
		`{{ raise_exception('never renders') }}`,
	} {
		tmpl, err := Compile(src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		_, err = tmpl.Render(context.Background(), []Message{{"system", "s"}, {"user", "u"}}, true)
		var le *LimitError
		if err == nil || errors.As(err, &le) || !strings.HasPrefix(err.Error(), "chat template: ") {
			t.Errorf("%s: render error %v", src, err)
		}
	}
	// A hostile branch behind a refused system turn is found by the
	// second probe.
	_, err := Compile(`{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}`+
		`{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "", "")
	if le := (*LimitError)(nil); !errors.As(err, &le) || le != errRecursion {
		t.Errorf("hostile after the system check: %v", err)
	}
}

func TestTemplateErrorsAreOneShortLine(t *testing.T) {
	tmpl, err := Compile(`{{ raise_exception('line one\nline two' + 'x' * 100000) }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(context.Background(), []Message{{"user", "u"}}, true)
	if err == nil || strings.Contains(err.Error(), "\n") || len(err.Error()) > maxErrorBytes+100 || !strings.Contains(err.Error(), "line one line two") {
		t.Errorf("error %q", err)
	}
}

func TestBoundedRange(t *testing.T) {
	tmpl, err := Compile(`{{ range(5)|list }}|{{ range(2, 5)|list }}|{{ range(10, 0, -3)|list }}|{{ range(0)|list }}|{{ range(3, 1)|list }}|{{ range(2.9)|list }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(context.Background(), []Message{{"user", "u"}}, true)
	if want := "[0, 1, 2, 3, 4]|[2, 3, 4]|[10, 7, 4, 1]|[]|[]|[0, 1]"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	for _, c := range []struct {
		start, stop, step int64
		want              uint64
	}{{0, 10, 3, 4}, {0, 9, 3, 3}, {-5, 5, 1, 10}, {5, -5, -1, 10}, {0, 0, 1, 0}, {1, 0, 1, 0},
		{-1 << 63, 1<<63 - 1, 1, 1<<64 - 1}, {1<<63 - 1, -1 << 63, -1 << 63, 2}} {
		if got := rangeLen(c.start, c.stop, c.step); got != c.want {
			t.Errorf("rangeLen(%d, %d, %d) = %d, want %d", c.start, c.stop, c.step, got, c.want)
		}
	}
}
