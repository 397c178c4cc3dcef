package testenv

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// VersitygwEnv names the versitygw binary the S3 tests run (make unit
// builds it into .cache/bin/versitygw and sets it).
const VersitygwEnv = "OVRUN_VERSITYGW"

// S3Server is a versitygw (an S3-compatible server, Apache-2.0) serving a
// folder with its posix backend on a loopback port, for one test: Root/B
// is bucket B and Root/B/NAME its object NAME.
type S3Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Root     string
	Access   string
	Secret   string

	t    testing.TB
	bin  string
	addr string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	log    *bytes.Buffer
}

// Versitygw starts $OVRUN_VERSITYGW on a free loopback port and a fresh
// folder until the test ends; the test is skipped when the variable is
// not set (outside make).
func Versitygw(t testing.TB) *S3Server {
	t.Helper()
	bin := os.Getenv(VersitygwEnv)
	if bin == "" {
		t.Skipf("%s is not set: run `make unit` (it builds versitygw into .cache/bin/versitygw and sets it)", VersitygwEnv)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &S3Server{Endpoint: "http://" + addr, Root: filepath.Join(t.TempDir(), "s3"), Access: "ovrun-test", Secret: "ovrun-test-secret",
		t: t, bin: bin, addr: addr}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start starts the server (again, after Stop) on its port and waits until
// it answers.
func (s *S3Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.bin, "--port", s.addr, "--access", s.Access, "--secret", s.Secret, "--quiet", "posix", s.Root)
	s.log = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("%s=%s: %v", VersitygwEnv, s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.cmd, s.exited = cmd, exited
	client := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			s.cmd = nil
			s.t.Fatalf("versitygw exited before it answered (%v):\n%s", err, s.log)
		default:
		}
		if resp, err := client.Get(s.Endpoint + "/"); err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw did not answer on %s within 30 s:\n%s", s.addr, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server (the bucket becomes unreachable); Start brings it
// back with the same folder.
func (s *S3Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
	if s.t.Failed() {
		s.t.Logf("versitygw output:\n%s", s.log)
	}
}

// Bucket creates the bucket name (a folder of the posix backend) and
// returns its folder.
func (s *S3Server) Bucket(name string) string {
	s.t.Helper()
	dir := filepath.Join(s.Root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return dir
}

// Env is the AWS environment of a client of the server.
func (s *S3Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL=" + s.Endpoint,
		"AWS_ACCESS_KEY_ID=" + s.Access,
		"AWS_SECRET_ACCESS_KEY=" + s.Secret,
		"AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
	}
}

// Environ is this process's environment without its AWS_ variables, and
// with Env: for a process that is a client of the server and of nothing
// else.
func (s *S3Server) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return append(env, s.Env()...)
}

// SetEnv makes the test's own environment Environ's (for clients in the
// test process), until the test ends.
func (s *S3Server) SetEnv(t testing.TB) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "") // restored when the test ends
			os.Unsetenv(k)
		}
	}
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// String is the server's endpoint, for messages.
func (s *S3Server) String() string { return fmt.Sprintf("versitygw at %s on %s", s.Endpoint, s.Root) }
