// Command workload is the benchmark corpus's bench-time Go seed: it runs a
// small service-like workload (an HTTP server on loopback answering JSON,
// gzip, regexp, hashing, sorting and templating requests, driven by
// concurrent clients) under the CPU profiler and writes what a Go service
// instrumented with pyroscope-go would upload:
//
//	workload -out DIR [-d 10s]
//
//	cpu.pb.gz    CPU profile of the whole run (runtime/pprof, gzipped)
//	heap.pb.gz   heap profile at the end (default MemProfileRate)
//
// Unlike tests/tools/genprof (a few hand-written hot loops), the stacks
// here go through net/http, encoding/json, compress/flate, regexp,
// crypto/sha256, sort and text/template, so a 10 s profile has hundreds
// of functions and thousands of locations, like a real service's.
// Standard library only; builds offline with Go >= 1.19.
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"text/template"
	"time"
)

type item struct {
	ID     int               `json:"id"`
	Name   string            `json:"name"`
	Tags   []string          `json:"tags"`
	Score  float64           `json:"score"`
	Attrs  map[string]string `json:"attrs"`
	Nested []struct {
		K string `json:"k"`
		V int    `json:"v"`
	} `json:"nested"`
}

var (
	words  = strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega")
	lineRe = regexp.MustCompile(`(?i)(\w+)@(\w+)\.(com|org|net)|id=(\d+)|status:\s*(ok|error|retry)`)
	tmpl   = template.Must(template.New("page").Parse(
		`<html><h1>{{.Title}}</h1>{{range .Items}}<li id="{{.ID}}">{{.Name}} {{printf "%.2f" .Score}}{{range .Tags}} #{{.}}{{end}}</li>{{end}}</html>`))
	retained [][]byte
	retainMu sync.Mutex
)

func makeItems(r *rand.Rand, n int) []item {
	out := make([]item, n)
	for i := range out {
		it := &out[i]
		it.ID = r.Intn(1 << 20)
		it.Name = words[r.Intn(len(words))] + "-" + words[r.Intn(len(words))]
		for k := 0; k < 1+r.Intn(5); k++ {
			it.Tags = append(it.Tags, words[r.Intn(len(words))])
		}
		it.Score = r.Float64() * 100
		it.Attrs = map[string]string{"region": words[r.Intn(4)], "tier": fmt.Sprint(r.Intn(3))}
		for k := 0; k < r.Intn(4); k++ {
			it.Nested = append(it.Nested, struct {
				K string `json:"k"`
				V int    `json:"v"`
			}{words[r.Intn(len(words))], r.Intn(1000)})
		}
	}
	return out
}

func handleJSON(w http.ResponseWriter, req *http.Request) {
	var in []item
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	sort.Slice(in, func(a, b int) bool { return in[a].Score > in[b].Score })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(in[:len(in)/2])
}

func handleGzip(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	w.Header().Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	for i := 0; i < 4; i++ {
		zw.Write(body)
	}
	zw.Close()
}

func handleRegexp(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	n := 0
	for _, ln := range bytes.Split(body, []byte("\n")) {
		n += len(lineRe.FindAllSubmatchIndex(ln, -1))
	}
	fmt.Fprintf(w, "matches=%d\n", n)
}

func handleHash(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	sum := sha256.Sum256(body)
	for i := 0; i < 50; i++ {
		sum = sha256.Sum256(append(sum[:], body[:len(body)/4]...))
	}
	retainMu.Lock()
	retained = append(retained, append([]byte(nil), body[:64]...))
	if len(retained) > 4096 {
		retained = retained[1024:]
	}
	retainMu.Unlock()
	fmt.Fprintf(w, "%x\n", sum)
}

func handlePage(w http.ResponseWriter, req *http.Request) {
	var in []item
	json.NewDecoder(req.Body).Decode(&in)
	tmpl.Execute(w, struct {
		Title string
		Items []item
	}{"items", in})
}

func client(base string, seed int64, deadline time.Time, wg *sync.WaitGroup) {
	defer wg.Done()
	r := rand.New(rand.NewSource(seed))
	c := &http.Client{Transport: &http.Transport{DisableCompression: false}}
	var logBuf bytes.Buffer
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&logBuf, "user%d@%s.com id=%d status: %s %s\n", i, words[r.Intn(len(words))], r.Intn(1e6),
			[]string{"ok", "error", "retry"}[r.Intn(3)], strings.Repeat(words[r.Intn(len(words))], 3))
	}
	for time.Now().Before(deadline) {
		items := makeItems(r, 50+r.Intn(150))
		js, _ := json.Marshal(items)
		var path string
		var body []byte
		switch r.Intn(5) {
		case 0:
			path, body = "/json", js
		case 1:
			path, body = "/gzip", js
		case 2:
			path, body = "/regexp", logBuf.Bytes()
		case 3:
			path, body = "/hash", js
		default:
			path, body = "/page", js
		}
		resp, err := c.Post(base+path, "application/json", bytes.NewReader(body))
		if err != nil {
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func main() {
	out := flag.String("out", ".", "output directory")
	d := flag.Duration("d", 10*time.Second, "how long to run (the CPU profile's duration)")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/json", handleJSON)
	mux.HandleFunc("/gzip", handleGzip)
	mux.HandleFunc("/regexp", handleRegexp)
	mux.HandleFunc("/hash", handleHash)
	mux.HandleFunc("/page", handlePage)
	go http.Serve(ln, mux)
	base := "http://" + ln.Addr().String()

	f, err := os.Create(filepath.Join(*out, "cpu.pb.gz"))
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Fatal(err)
	}
	deadline := time.Now().Add(*d)
	var wg sync.WaitGroup
	for i := 0; i < 2*runtime.NumCPU(); i++ {
		wg.Add(1)
		go client(base, int64(i+1), deadline, &wg)
	}
	wg.Wait()
	pprof.StopCPUProfile()
	f.Close()
	runtime.GC()
	h, err := os.Create(filepath.Join(*out, "heap.pb.gz"))
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.WriteHeapProfile(h); err != nil {
		log.Fatal(err)
	}
	h.Close()
	fmt.Printf("workload: wrote cpu.pb.gz and heap.pb.gz to %s after %s\n", *out, *d)
}
