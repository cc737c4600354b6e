package outboxdemo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NATSServerPath is where FindNATSServer looks when nats-server is not in PATH.
const NATSServerPath = "/usr/sbin/nats-server"

// FindNATSServer returns the path of the nats-server binary: in PATH, else NATSServerPath. make demo
// and make test build a pinned nats-server into the repository's bin/ (tools/nats-server) and put it
// first in PATH.
func FindNATSServer() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if st, err := os.Stat(NATSServerPath); err == nil && !st.IsDir() {
		return NATSServerPath, nil
	}
	return "", errors.New("nats-server not found (neither in PATH nor at " + NATSServerPath + "): the demo runs a private " +
		"NATS server with JetStream; run it through make demo (which builds a pinned one into bin/), or put one in PATH")
}

// natsServer is a private nats-server with JetStream, on a port and store directory of its own, that
// can be restarted on the same port with the same store (its streams and consumers survive).
type natsServer struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
	log      *os.File
}

func startNATS(bin, dir string) (*natsServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &natsServer{bin: bin, dir: dir, port: port}
	return s, s.start()
}

func (s *natsServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *natsServer) start() error {
	log, err := os.OpenFile(filepath.Join(s.dir, "nats-server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.log = log
	s.cmd = exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "jetstream"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start nats-server: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("nats-server did not listen on %s within 15s (log: %s)", s.addr(), log.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops the server (SIGTERM, then SIGKILL after 10s) and waits for it.
func (s *natsServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	_ = s.log.Close()
	s.cmd = nil
}

func (s *natsServer) restart() error {
	s.stop()
	return s.start()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// proxy forwards TCP connections to target. cut closes every connection it carries and refuses new
// ones for a while: a network cut between the services and the broker.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
	wg    sync.WaitGroup
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *proxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

func (p *proxy) pipe(c net.Conn) {
	u, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, u) {
		return
	}
	var once sync.Once
	closeBoth := func() { once.Do(func() { _ = c.Close(); _ = u.Close(); p.untrack(c, u) }) }
	go func() { _, _ = io.Copy(u, c); closeBoth() }()
	_, _ = io.Copy(c, u)
	closeBoth()
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// clients returns the number of client connections the proxy carries.
func (p *proxy) clients() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// cut closes every connection and refuses new ones for d; it returns how many connections it cut
// (two per client: the client's and the server's side).
func (p *proxy) cut(d time.Duration) int {
	p.mu.Lock()
	p.down = true
	n := len(p.conns)
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	return n / 2
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.cut(0)
}

// child is a service process (the relay, the notifier). Lines of its stdout starting with "HANG"
// (its fault injection) arrive on hang.
type child struct {
	name string
	cmd  *exec.Cmd
	hang chan string
	done chan struct{}
	err  error // after done
}

func startChild(name string, cmd *exec.Cmd, stderr io.Writer) (*child, error) {
	c := &child{name: name, cmd: cmd, hang: make(chan string, 1), done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "HANG") {
				select {
				case c.hang <- line:
				default:
				}
			}
		}
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop sends SIGTERM (SIGKILL after 20s) and waits; it returns the exit error unless SIGTERM ended
// the process cleanly.
func (c *child) stop() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s had exited: %v", c.name, c.err)
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		c.kill()
		return fmt.Errorf("%s did not stop within 20s of SIGTERM; killed", c.name)
	}
	return c.err
}
