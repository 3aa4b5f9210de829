package observer

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"

	"github.com/thrashscope/thrashscope/internal/api"
)

// TestServerLimits holds the server's limits to what a slow or idle client
// may keep: 50 clients trickling a POST body a byte every 2 s and 50 idle
// kept-alive connections are all cut within the (shortened) timeouts, an
// oversized header is refused, and /metrics and /healthz answer fast
// throughout.
func TestServerLimits(t *testing.T) {
	l := limits{ReadHeader: time.Second, Read: 2 * time.Second, Write: 5 * time.Second, Idle: 2 * time.Second, MaxHeaderBytes: 16 << 10, MaxConns: 256}
	h := api.NewHandler(api.Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }, ListenHosts: []string{"127.0.0.1"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := l.server(h)
	go srv.Serve(netutil.LimitListener(ln, l.MaxConns))
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		return c
	}
	// 50 idle: one request answered, then nothing.
	for range 50 {
		c := dial()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// 50 trickling a body a byte every 2 s.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); wg.Wait() })
	for range 50 {
		c := dial()
		fmt.Fprintf(c, "POST /api/v1/runs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", addr)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Second):
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		})
	}

	client := &http.Client{Timeout: 2 * time.Second}
	for _, path := range []string{"/healthz", "/metrics", "/healthz", "/metrics"} {
		t0 := time.Now()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s beside 100 slow clients: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if d := time.Since(t0); resp.StatusCode != http.StatusOK || d > 500*time.Millisecond {
			t.Errorf("GET %s beside 100 slow clients: %d in %s, want 200 within 500ms", path, resp.StatusCode, d)
		}
	}

	// The bound is the documented 16 KiB of request line and headers, not
	// net/http's MaxHeaderBytes, past which it reads 4 KiB more.
	for _, tc := range []struct {
		bytes int
		want  int
	}{{64 << 10, http.StatusRequestHeaderFieldsTooLarge}, {16<<10 + 512, http.StatusRequestHeaderFieldsTooLarge}, {15 << 10, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("x", tc.bytes))
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != tc.want {
			t.Errorf("a header of %d bytes: %v %v, want %d", tc.bytes, resp, err, tc.want)
		}
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}

	// Every slow or idle connection is closed by the server within its
	// timeouts (2 s), with a second of slack for a loaded machine.
	deadline := time.Now().Add(4 * time.Second)
	for i, c := range conns {
		c.SetReadDeadline(deadline)
		_, err := io.Copy(io.Discard, c) // returns at EOF: the server closed it
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection %d (%s) still open %s after the timeouts", i, map[bool]string{true: "idle", false: "trickling"}[i < 50], 4*time.Second)
		}
	}
}
