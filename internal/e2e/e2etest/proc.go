package e2etest

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is a server process of the tests (cove serve, control or node),
// run after run: it starts the binary, keeps all it printed over every
// run, and stops it.
type proc struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the running process has ended
	logs bytes.Buffer
}

// start runs bin with args and the environment plus env; done is closed
// when the process ends.
func (p *proc) start(bin string, args, env []string) (done <-chan struct{}, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = lockedWriter{&p.mu, &p.logs}
	cmd.Stderr = lockedWriter{&p.mu, &p.logs}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := make(chan struct{})
	p.cmd, p.done = cmd, c
	go func() { cmd.Wait(); close(c) }() // owned: stop and wait wait for it
	return c, nil
}

// stop ends the process with sig and waits for it, killing it after 30s.
func (p *proc) stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	p.forget()
}

// wait waits up to d for the process to end by itself and returns its
// exit code; ok is false when it still runs.
func (p *proc) wait(d time.Duration) (code int, ok bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return 0, false
	}
	select {
	case <-done:
	case <-time.After(d):
		return 0, false
	}
	p.forget()
	return cmd.ProcessState.ExitCode(), true
}

func (p *proc) forget() {
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
}

// pid is the running process's ID, 0 when it is stopped.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// tail is the last n bytes the process printed, over all its runs.
func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.logs.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
