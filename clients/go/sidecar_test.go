package toolgate_test

// The tests run against a REAL `toolgate sidecar` process on a temporary
// SQLite database, enforcing a bundle the real CLI built and signed from
// the profile below (as tests/python/conftest.py does). The CLI comes from
// $TOOLGATE_BIN, default <repo>/target/debug/toolgate (`cargo build -p
// toolgate`); without it the tests fail, they are never skipped.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const tenant = "gotest"

// Low-risk, high-risk, deny and escalate rules.
const profile = `apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: go-client, namespace: agents}
spec:
  mode: rules
  aliases: {Bash: bash}
  rules:
    bash: {deny: ["rm *"], allow: ["echo *", "git status"], escalate: ["deploy *"]}
    lookup: {allow: ["*"]}
    transfer: {allow: ["*"]}
    drop_table: {deny: ["*"]}
    publish: {escalate: ["*"]}
    shout: {allow: ["hello *"]}
    workspace.read: {allow: ["*"]}
    workspace.list: {allow: ["*"]}
    workspace.stat: {allow: ["*"]}
    workspace.write: {allow: ["*"]}
  hardline:
    paths: ["**/.env"]
  effects:
    bash:       {sideEffect: PROCESS_EXEC, risk: high, matchArgs: [command]}
    lookup:     {sideEffect: NONE, risk: low, readOnly: true, allowParallel: true}
    transfer:   {sideEffect: EXTERNAL_WRITE, risk: high}
    drop_table: {sideEffect: EXTERNAL_WRITE, risk: high}
    publish:    {sideEffect: EXTERNAL_WRITE, risk: high}
    shout:      {sideEffect: NONE, risk: low, matchArgs: [text], enforcement: warn}
    workspace.read:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
    workspace.list:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
    workspace.stat:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
    workspace.write: {sideEffect: WORKSPACE_WRITE, risk: write}
  approvals: {ttlSeconds: 300}
`

// sidecar is the running sidecar every test shares.
var sidecar struct {
	url      string
	database string
	bin      string
}

func TestMain(m *testing.M) {
	os.Exit(runWithSidecar(m))
}

func runWithSidecar(m *testing.M) int {
	bin, err := toolgateBin()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "toolgate-go-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	proc, err := startSidecar(bin, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: sidecar:", err)
		return 1
	}
	defer stop(proc)
	// The example reads the sidecar's URL from the environment, as an agent does.
	os.Setenv("TOOLGATE_URL", sidecar.url)
	return m.Run()
}

func toolgateBin() (string, error) {
	path := os.Getenv("TOOLGATE_BIN")
	if path == "" {
		target := os.Getenv("CARGO_TARGET_DIR")
		if target == "" {
			target = filepath.Join("..", "..", "target")
		}
		path = filepath.Join(target, "debug", "toolgate")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("%s not found: build it with `cargo build -p toolgate` (or set $TOOLGATE_BIN)", abs)
	}
	return abs, nil
}

func runCLI(bin string, args ...string) error {
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("toolgate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// process is a started sidecar and a channel closed when it has exited.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startSidecar(bin, dir string) (*process, error) {
	keys := filepath.Join(dir, "keys")
	if err := runCLI(bin, "keygen", "--out", keys); err != nil {
		return nil, err
	}
	profilePath := filepath.Join(dir, "profile.yaml")
	if err := os.WriteFile(profilePath, []byte(profile), 0o600); err != nil {
		return nil, err
	}
	bundle := filepath.Join(dir, "bundle.json")
	if err := runCLI(bin, "bundle", "build", "--profile", profilePath, "--key", filepath.Join(keys, "signing.key"),
		"--sequence", "1", "--valid-for", "1h", "--out", bundle); err != nil {
		return nil, err
	}
	database := "sqlite://" + filepath.Join(dir, "toolgate.db") + "?mode=rwc"
	logPath := filepath.Join(dir, "sidecar.log")
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		opsPort, err := freePort()
		if err != nil {
			return nil, err
		}
		log, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "sidecar",
			"--bundle", bundle, "--trust", filepath.Join(keys, "signing.pub"),
			"--database", database,
			"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--ops-listen", fmt.Sprintf("127.0.0.1:%d", opsPort),
			"--workspace-base", filepath.Join(dir, "workspaces"), "--tenant", tenant,
			"--pod-name", "go-agent", "--pod-namespace", "agents")
		cmd.Stdout, cmd.Stderr = log, log
		cmd.Env = append(os.Environ(), "RUST_LOG=warn")
		if err := cmd.Start(); err != nil {
			log.Close()
			return nil, err
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited); log.Close() }()
		if waitReady(fmt.Sprintf("http://127.0.0.1:%d/readyz", opsPort), exited) {
			sidecar.url = fmt.Sprintf("http://127.0.0.1:%d", port)
			sidecar.database, sidecar.bin = database, bin
			return &process{cmd, exited}, nil
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	out, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("did not become ready:\n%s", tail(string(out), 5000))
}

func waitReady(readyz string, exited <-chan struct{}) bool {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := hc.Get(readyz); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func stop(p *process) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// answerLater answers an approval with the real `toolgate approvals` CLI
// after delay, as an operator would; the returned func waits for it and
// fails the test if the CLI failed.
func answerLater(t *testing.T, approvalID, verb string, delay time.Duration) func() {
	t.Helper()
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(delay)
		err = runCLI(sidecar.bin, "approvals", verb, approvalID, "--database", sidecar.database,
			"--by", "alice", "--reason", "gotest")
	}()
	return func() {
		t.Helper()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// runID is a run of the test's own, so approvals and intents never mix.
func runID(t *testing.T) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("go-%s-%d", name, time.Now().UnixNano())
}

func bg() context.Context { return context.Background() }
