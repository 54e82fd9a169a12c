// pprofapp -- a Go service with net/http/pprof for the scraper's tests
// (tests/integration/test_scrape.py): what a service looks like to pull
// mode, with no SDK.
//
//	pprofapp -addr 127.0.0.1:PORT [-tee DIR] [-burn] [-n N -ports-file F]
//	         [-memrate R]
//
// It counts every allocation (runtime.MemProfileRate = 1; -memrate sets
// another rate, as B19's many targets need) so a heap profile's alloc_*
// values are exact, burns CPU in main.burnA and
// main.burnB when -burn is given, and allocates in main.allocSmall only
// when asked (GET /alloc?n=N&size=S, answered once the allocations are in
// the heap profile: two GCs publish them).  With -tee, every CPU profile
// served by /debug/pprof/profile is also written to DIR/cpu-<n>.pb.gz, so
// the test knows exactly what a scraper fetched.  With -n, it also
// listens on N more loopback ports (written to F, one per line), each
// serving the same endpoints as a target of its own, and GET /stats (on
// -addr) answers, per port, the times (unix ms) each path was asked.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var sink [][]byte
var sinkMu sync.Mutex

//go:noinline
func allocSmall(n, size int) {
	keep := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		keep = append(keep, make([]byte, size))
	}
	sinkMu.Lock()
	sink = keep
	sinkMu.Unlock()
}

//go:noinline
func burnA(d time.Duration) uint64 {
	var x uint64
	for t := time.Now(); time.Since(t) < d; {
		for i := 0; i < 10000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

//go:noinline
func burnB(d time.Duration) uint64 {
	var x uint64 = 7
	for t := time.Now(); time.Since(t) < d; {
		for i := 0; i < 10000; i++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	return x
}

// teeWriter keeps a copy of what a handler writes.
type teeWriter struct {
	http.ResponseWriter
	buf    bytes.Buffer
	status int
}

func (t *teeWriter) WriteHeader(code int) {
	t.status = code
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.buf.Write(p)
	return t.ResponseWriter.Write(p)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6060", "listen address")
	memrate := flag.Int("memrate", 1, "runtime.MemProfileRate (1: every allocation)")
	tee := flag.String("tee", "", "directory for copies of served CPU profiles")
	burn := flag.Bool("burn", false, "burn CPU in main.burnA and main.burnB")
	flag.Int("n", 0, "more loopback ports, each a target")
	flag.String("ports-file", "", "where the -n ports are written")
	flag.Parse()
	runtime.MemProfileRate = *memrate

	if *burn {
		go func() {
			var x uint64
			for {
				x += burnA(20 * time.Millisecond)
				x += burnB(10 * time.Millisecond)
				time.Sleep(30 * time.Millisecond)
			}
		}()
	}
	var ncpu int64
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/profile", func(w http.ResponseWriter, r *http.Request) {
		if *tee == "" {
			pprof.Profile(w, r)
			return
		}
		tw := &teeWriter{ResponseWriter: w, status: 200}
		pprof.Profile(tw, r)
		if tw.status == 200 && tw.buf.Len() > 0 {
			n := atomic.AddInt64(&ncpu, 1)
			p := filepath.Join(*tee, fmt.Sprintf("cpu-%d.pb.gz", n))
			if err := os.WriteFile(p+".tmp", tw.buf.Bytes(), 0o644); err == nil {
				os.Rename(p+".tmp", p)
			}
		}
	})
	mux.HandleFunc("/alloc", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		allocSmall(n, size)
		runtime.GC()
		runtime.GC()
		fmt.Fprintln(w, "ok")
	})
	// per port and path, the times it was asked
	var statsMu sync.Mutex
	stats := map[string]map[string][]int64{}
	counted := func(port string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			statsMu.Lock()
			if stats[port] == nil {
				stats[port] = map[string][]int64{}
			}
			stats[port][r.URL.Path] = append(stats[port][r.URL.Path],
				time.Now().UnixMilli())
			statsMu.Unlock()
			h.ServeHTTP(w, r)
		})
	}
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		statsMu.Lock()
		defer statsMu.Unlock()
		json.NewEncoder(w).Encode(stats)
	})
	n := flag.Lookup("n").Value.(flag.Getter).Get().(int)
	if n > 0 {
		var ports []string
		for i := 0; i < n; i++ {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				log.Fatal(err)
			}
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			ports = append(ports, port)
			go http.Serve(ln, counted(port, mux))
		}
		pf := flag.Lookup("ports-file").Value.String()
		if err := os.WriteFile(pf+".tmp", []byte(strings.Join(ports, "\n")+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
		os.Rename(pf+".tmp", pf)
	}
	log.Fatal(http.ListenAndServe(*addr, mux))
}
