// Package tcpproxy is a TCP proxy for the adapters' tests. It forwards each connection it accepts to
// a server and can hold (freeze) the bytes the server sends, release them (thaw), or drop them and
// cut every connection, refusing new connections until allowed again. The bytes the client sends
// always flow.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a server. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and the copies

	mu     sync.Mutex
	open   chan struct{} // closed while not frozen
	refuse bool          // set by Cut, cleared by Thaw
	closed bool          // set by the cleanup
	conns  map[*pair]struct{}
}

// pair is one proxied connection: the client's and the proxy's to the server.
type pair struct {
	client, server net.Conn
	cut            chan struct{} // closed when the connection is cut
}

// New listens on a free port of 127.0.0.1 and forwards each connection to target (host:port), which
// it dials when the connection is accepted; a connection whose dial fails is closed. A t.Cleanup
// stops listening, closes every connection (dropping held bytes) and waits for the proxy's
// goroutines to end.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, open: make(chan struct{}), conns: map[*pair]struct{}{}}
	close(p.open)
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the address (host:port) clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &pair{client: client, server: server, cut: make(chan struct{})}
		p.mu.Lock()
		if p.refuse || p.closed { // cut while dialing
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(server, client); _ = server.Close() })
		p.wg.Go(func() { p.copyHeld(c) })
	}
}

// copyHeld copies the server's bytes to the client, chunk by chunk, holding each chunk while the
// proxy is frozen; a chunk held when the connection is cut is dropped.
func (p *Proxy) copyHeld(c *pair) {
	defer func() {
		_ = c.client.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			select {
			case <-open:
			case <-c.cut:
				return
			}
			select {
			case <-c.cut: // cut as the proxy was thawed
				return
			default:
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Freeze holds the bytes the server sends from now on: on each connection, open or opened later, the
// next chunk read from the server is kept, not written to the client, until Thaw or Cut, and the
// server's later bytes wait unread behind it. Bytes already written to a client stay written, and the
// bytes clients send keep reaching the server. Freezing a frozen proxy does nothing.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Thaw lets bytes and connections through again: each held chunk is written to its client, in order,
// and connections are accepted again after a Cut.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Cut closes every connection, both the client's and the one to the server, dropping the bytes held
// on it (they never reach the client), and refuses new connections (accepts and closes them at once)
// until Thaw. A frozen proxy stays frozen: Thaw ends both.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
	for c := range p.conns {
		close(c.cut)
		_ = c.client.Close()
		_ = c.server.Close()
		delete(p.conns, c)
	}
}
