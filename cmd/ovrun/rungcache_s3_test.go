package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/rungcache"
	"github.com/ovtoolkit/ovrun/runtime"
)

// The compiled-rung cache in a bucket (--cache-dir s3://rungs/fleet),
// through the binary and the real SmolLM2, against versitygw (an
// S3-compatible server; make unit builds it and sets OVRUN_VERSITYGW,
// without which these tests skip).

const bucketURL = "s3://rungs/fleet"

// bucket starts versitygw with the bucket rungs and returns it and the
// folder its objects under fleet/ are files in.
func bucket(t *testing.T) (*testenv.S3Server, string) {
	t.Helper()
	srv := testenv.Versitygw(t)
	return srv, filepath.Join(srv.Bucket("rungs"), "fleet")
}

// replicaEnv is the environment of a process on its own machine: the
// server's AWS settings and a local tier of its own.
func replicaEnv(srv *testenv.S3Server, local string) []string {
	return append(srv.Environ(), rungcache.LocalDirEnv+"="+local)
}

// runWith runs ovrun run in env and returns its summary and stderr.
func runWith(t *testing.T, env []string, name string, args ...string) (*runtime.Summary, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), name+".json")
	cmd := exec.Command(ovrunBin, append(append([]string{"run"}, args...), "--json", out, "--quiet")...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v: %s", name, err, stderr.String())
	}
	return readSummary(t, out), stderr.String()
}

// lsJSON is ovrun cache ls --json of where, in env.
func lsJSON(t *testing.T, env []string, where string) []cacheEntry {
	t.Helper()
	cmd := exec.Command(ovrunBin, "cache", "ls", "--cache-dir", where, "--json")
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cache ls --cache-dir %s: %v: %s", where, err, stderr.String())
	}
	var es []cacheEntry
	if err := json.Unmarshal(stdout.Bytes(), &es); err != nil {
		t.Fatalf("cache ls --json: %v\n%s", err, stdout.String())
	}
	return es
}

// objects lists the bucket's files of entries (metadata and blobs; not
// the last-use marks), sorted.
func objects(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, pat := range []string{"*.json", "*.blob"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, p := range m {
			names = append(names, filepath.Base(p))
		}
	}
	slices.Sort(names)
	return names
}

// Two serve replicas share a bucket, each with its own empty local tier:
// the first compiles its first rung and publishes it before it is ready;
// the second is ready from the bucket, compiling nothing (it publishes
// nothing, and its local tier holds the first replica's entries as they
// were published), and both answer alike.
func TestServeReplicasShareABucket(t *testing.T) {
	g := testenv.SmolLM2(t)
	srv, dir := bucket(t)
	args := []string{"--model", g, "--precision", "f32", "--ladder", "128,256", "--batching", "off", "--graph-per-rung", "--cache-dir", bucketURL}
	localA, localB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")

	first, base, _ := startServe(t, replicaEnv(srv, localA), args...)
	published := objects(t, dir)
	if len(published) < 2 {
		t.Fatalf("the first replica is ready and the bucket holds %q: it published no entry", published)
	}
	es := lsJSON(t, srv.Environ(), bucketURL)
	code, answerA := chatOnce(t, base, colorsQuestion, 20)
	if code != 200 {
		t.Fatalf("first replica: %d %q", code, answerA)
	}
	first.Process.Kill()
	first.Wait()

	published = objects(t, dir) // with what the request compiled
	second, base, lines := startServe(t, replicaEnv(srv, localB), args...)
	if got := objects(t, dir); !slices.Equal(got, published) {
		t.Errorf("the second replica changed the bucket's entries while starting (it compiled):\nbefore %q\nafter  %q", published, got)
	}
	local := lsJSON(t, srv.Environ(), localB)
	if len(local) == 0 {
		t.Fatal("the second replica's local tier is empty: it read nothing from the bucket")
	}
	for _, l := range local {
		i := slices.IndexFunc(es, func(e cacheEntry) bool { return e.Key == l.Key })
		if i < 0 || !es[i].Created.Equal(l.Created) || es[i].CompileS != l.CompileS {
			t.Errorf("the second replica's entry %.12s (%s, created %v) is not one the first published before it was ready: compiled again", l.Key, graphName(l), l.Created)
		}
	}
	code, answerB := chatOnce(t, base, colorsQuestion, 20)
	if code != 200 || answerB != answerA || answerA != colorsAnswer {
		t.Errorf("answers: first %q, second %d %q; want %q", answerA, code, answerB, colorsAnswer)
	}
	second.Process.Kill()
	second.Wait()
	for l := range lines {
		if strings.Contains(l, "note:") {
			t.Errorf("the second replica said: %s", l)
		}
	}
}

func graphName(e cacheEntry) string {
	return rungcache.Meta{Kind: e.Kind, Capacity: e.Capacity, Chunk: e.Chunk}.Graph()
}

// A blob damaged in the bucket is discarded with a note and its graph is
// compiled again and published again, with the same tokens; the next
// process imports it. Then ovrun cache ls, prune and clear on the bucket.
func TestDamagedBucketObjectIsCompiledAgain(t *testing.T) {
	g := testenv.SmolLM2(t)
	srv, dir := bucket(t)
	args := []string{"--model", g, "--ladder", "64,128", "--policy", "grow-one-ahead", "--prompt-tokens", "24", "--decode-tokens", "64", "--cache-dir", bucketURL, "--graph-per-rung"}
	cold, _ := runWith(t, replicaEnv(srv, filepath.Join(t.TempDir(), "a")), "cold", args...)
	blobs, _ := filepath.Glob(filepath.Join(dir, "*.blob"))
	if len(blobs) != 2 {
		t.Fatalf("the bucket holds blobs %q, want 2", blobs)
	}
	for _, p := range blobs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x01
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	damaged, stderr := runWith(t, replicaEnv(srv, filepath.Join(t.TempDir(), "b")), "damaged", args...)
	notes := strings.Join(damaged.Notes, "\n")
	if n := strings.Count(notes, "rung cache: discarded entry"); n != 2 || !strings.Contains(notes, "in "+bucketURL+": the CRC-32C") {
		t.Errorf("%d notes of discarded entries, want 2 naming the bucket and the CRC-32C:\n%s", n, notes)
	}
	for _, r := range damaged.Rungs {
		if r.CompileSource != runtime.OriginCompiled {
			t.Errorf("damaged run, rung %d: %s, want compiled", r.Capacity, r.CompileSource)
		}
	}
	if !slices.Equal(damaged.Predictions, cold.Predictions) {
		t.Errorf("after discarding damaged entries the run predicts %v, want %v", damaged.Predictions, cold.Predictions)
	}
	if strings.Contains(stderr, "cannot be reached") {
		t.Errorf("stderr: %s", stderr)
	}
	again, _ := runWith(t, replicaEnv(srv, filepath.Join(t.TempDir(), "c")), "again", args...)
	for _, r := range again.Rungs {
		if r.CompileSource != runtime.OriginImported {
			t.Errorf("after the entries were compiled again, rung %d: %s, want imported", r.Capacity, r.CompileSource)
		}
	}

	env := srv.Environ()
	es := lsJSON(t, env, bucketURL)
	if len(es) != 2 || es[0].LastUsed.Before(es[1].LastUsed) {
		t.Fatalf("cache ls on the bucket: %+v", es)
	}
	stdout, stderr, code := ovrunWith(t, env, nil, "cache", "ls", "--cache-dir", bucketURL)
	if code != 0 || !strings.Contains(stdout, "2 entries") || !strings.Contains(stdout, es[0].Key[:12]) {
		t.Errorf("cache ls: %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = ovrunWith(t, env, nil, "cache", "prune", "--cache-dir", bucketURL, "--max-size", formatBytes(es[0].Bytes))
	if code != 0 || !strings.Contains(stdout, "removed 1 entries") {
		t.Fatalf("cache prune: %d\n%s%s", code, stdout, stderr)
	}
	if left := lsJSON(t, env, bucketURL); len(left) != 1 || left[0].Key != es[0].Key {
		t.Errorf("after prune: %+v, want the most recently used entry %s", left, es[0].Key[:12])
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = ovrunWith(t, env, nil, "cache", "clear", "--cache-dir", bucketURL)
	if code != 0 || !strings.Contains(stdout, "removed 1 entries") {
		t.Fatalf("cache clear: %d\n%s%s", code, stdout, stderr)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 || left[0].Name() != "README" {
		t.Errorf("after clear the bucket holds %v, want only README", left)
	}
	for _, tc := range []struct{ where, want string }{
		{"s3://Rungs/x", "is not a bucket name"},
		{"gs://rungs/x", "no store for gs://"},
	} {
		if _, stderr, code := ovrunWith(t, env, nil, "cache", "ls", "--cache-dir", tc.where); code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("cache ls --cache-dir %s: exit %d, %s; want an error naming %q", tc.where, code, stderr, tc.want)
		}
		if _, stderr, code := ovrunWith(t, env, nil, "run", "--model", g, "--cache-dir", tc.where); code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("run --cache-dir %s: exit %d, %s; want an error naming %q", tc.where, code, stderr, tc.want)
		}
	}
}

// The bucket's server goes away while a run compiles its rungs: one note
// on stderr, the run finishes as it would have, its graphs kept in its
// local tier. Started without a server at all, a run says so once too.
func TestBucketLostMidRun(t *testing.T) {
	g := testenv.SmolLM2(t)
	srv, dir := bucket(t)
	local := filepath.Join(t.TempDir(), "local")
	js := filepath.Join(t.TempDir(), "run.json")
	cmd := exec.Command(ovrunBin, "run", "--model", g, "--ladder", "64,128", "--policy", "grow-one-ahead", "--prompt-tokens", "24", "--decode-tokens", "64",
		"--cache-dir", bucketURL, "--graph-per-rung", "--json", js, "--quiet")
	cmd.Env = replicaEnv(srv, local)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The first rung is published: stop the server before the second is.
	deadline := time.Now().Add(2 * time.Minute)
	for len(objects(t, dir)) < 2 {
		select {
		case err := <-exited:
			t.Fatalf("the run ended (%v) before it published its first rung:\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no entry in the bucket after 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv.Stop()
	if err := <-exited; err != nil {
		t.Fatalf("the run failed when the bucket went away: %v\n%s", err, stderr.String())
	}
	s := readSummary(t, js)
	var notes []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "rung cache") {
			notes = append(notes, l)
		}
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "ovrun: note: rung cache: "+bucketURL+" cannot be reached (") {
		t.Errorf("stderr %q, want one note that the bucket cannot be reached", stderr.String())
	}
	if len(s.Rungs) != 2 || s.Error != "" || len(s.Predictions) != 65 {
		t.Errorf("the run: %d rungs, error %q, %d predictions", len(s.Rungs), s.Error, len(s.Predictions))
	}
	if es := lsJSON(t, os.Environ(), local); len(es) != 2 {
		t.Errorf("the local tier holds %d entries, want both rungs", len(es))
	}

	// No server from the start: the same, from the local tier this time.
	_, stderr2 := runWith(t, replicaEnv(srv, local), "no-server", "--model", g, "--ladder", "64,128", "--policy", "grow-one-ahead", "--prompt-tokens", "24", "--decode-tokens", "64",
		"--cache-dir", bucketURL, "--graph-per-rung")
	if n := strings.Count(stderr2, "cannot be reached"); n != 1 {
		t.Errorf("without a server: stderr %q, want one note", stderr2)
	}
}

// Two processes compile and publish the same graphs at once into an empty
// bucket: a third imports every one of them, whole.
func TestConcurrentWritersShareABucket(t *testing.T) {
	g := testenv.SmolLM2(t)
	srv, dir := bucket(t)
	args := []string{"run", "--model", g, "--ladder", "64,128", "--policy", "grow-one-ahead", "--prompt-tokens", "24", "--decode-tokens", "64",
		"--cache-dir", bucketURL, "--graph-per-rung", "--quiet"}
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for _, name := range []string{"a", "b"} {
		cmd := exec.Command(ovrunBin, args...)
		cmd.Env = replicaEnv(srv, filepath.Join(t.TempDir(), name))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer %d: %v\n%s", i, err, outs[i])
		}
	}
	third, stderr := runWith(t, replicaEnv(srv, filepath.Join(t.TempDir(), "c")), "third", args[1:len(args)-1]...)
	for _, r := range third.Rungs {
		if r.CompileSource != runtime.OriginImported {
			t.Errorf("rung %d: %s, want imported (notes %q, stderr %q)", r.Capacity, r.CompileSource, third.Notes, stderr)
		}
	}
	if metas, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(metas) != 2 {
		t.Errorf("the bucket holds metadata %q, want one per graph", metas)
	}
}
