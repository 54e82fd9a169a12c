// Command genprof writes real Go runtime profiles for Smolder's integration
// tests: the same bytes a Go service (or pyroscope-go) would upload.
//
//	genprof -out DIR [-cpu 1.5s]
//	genprof -out DIR -service [-fib N] [-cpu 1.5s]
//
// It writes, gzipped as runtime/pprof writes them:
//
//	cpu.pb.gz        CPU profile of a few busy functions, some small enough
//	                 to be inlined (so locations carry several lines), run
//	                 under pprof.Do labels (samples carry string labels)
//	heap.pb.gz       heap profile with MemProfileRate=1 (every allocation)
//	mutex.pb.gz      mutex contention, SetMutexProfileFraction(1)
//	block.pb.gz      blocking on channels, WaitGroup and a mutex,
//	                 SetBlockProfileRate(1)
//	goroutine.pb.gz  goroutines parked under labels
//
// With -service it writes only cpu.pb.gz, of a service's request loop
// (serveLoop): each request parses, computes fib(N) and sorts, one after
// the other, so each function's share of the profile follows its work; a
// release with a larger -fib regresses fib (the top-changes test).
//
// Standard library only; builds offline with Go >= 1.19.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"time"
)

func init() {
	// Before any allocation worth seeing: record every one.
	runtime.MemProfileRate = 1
}

// sink keeps results and allocations alive so nothing is optimised away
// and the heap profile has in-use data.
var (
	sink     uint64
	sinkMu   sync.Mutex
	retained [][]byte
)

func keep(v uint64) {
	sinkMu.Lock()
	sink += v
	sinkMu.Unlock()
}

// mix64 is small enough to be inlined into its callers.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// square is inlined too.
func square(x uint64) uint64 { return x * x }

//go:noinline
func hashLoop(deadline time.Time) uint64 {
	var s uint64
	for time.Now().Before(deadline) {
		for i := uint64(0); i < 20000; i++ {
			s += mix64(i ^ s)
		}
	}
	return s
}

//go:noinline
func fib(n int) int {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

//go:noinline
func fibLoop(deadline time.Time) uint64 {
	var s uint64
	for time.Now().Before(deadline) {
		s += uint64(fib(22))
	}
	return s
}

//go:noinline
func sortLoop(deadline time.Time) uint64 {
	var s uint64
	xs := make([]int, 4096)
	for time.Now().Before(deadline) {
		for i := range xs {
			xs[i] = int(mix64(uint64(i)+s) % 100000)
		}
		sort.Ints(xs)
		s += square(uint64(xs[len(xs)/2]))
	}
	return s
}

//go:noinline
func parseRequest(s uint64) uint64 {
	for i := uint64(0); i < 20000; i++ {
		s += mix64(i ^ s)
	}
	return s
}

//go:noinline
func sortResults(s uint64) uint64 {
	xs := make([]int, 2048)
	for i := range xs {
		xs[i] = int(mix64(uint64(i)+s) % 100000)
	}
	sort.Ints(xs)
	return uint64(xs[len(xs)/2])
}

//go:noinline
func handleRequest(s uint64, fibN int) uint64 {
	s = parseRequest(s)
	s += uint64(fib(fibN))
	return sortResults(s)
}

// serveLoop handles requests one after another until the deadline.
func serveLoop(deadline time.Time, fibN int) {
	var s uint64
	for time.Now().Before(deadline) {
		s = handleRequest(s, fibN)
	}
	keep(s)
}

// cpuProfile writes dir/cpu.pb.gz: the CPU profile of body.
func cpuProfile(dir string, body func()) error {
	f, err := os.Create(filepath.Join(dir, "cpu.pb.gz"))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	body()
	pprof.StopCPUProfile()
	return f.Close()
}

func servicePhase(dir string, d time.Duration, fibN int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return cpuProfile(dir, func() { serveLoop(time.Now().Add(d), fibN) })
}

func cpuPhase(d time.Duration) {
	deadline := time.Now().Add(d)
	ctx := context.Background()
	var wg sync.WaitGroup
	work := []struct {
		name string
		fn   func(time.Time) uint64
	}{
		{"hash", hashLoop},
		{"fib", fibLoop},
		{"sort", sortLoop},
	}
	for _, w := range work {
		w := w
		wg.Add(1)
		go func() {
			defer wg.Done()
			pprof.Do(ctx, pprof.Labels("worker", w.name, "phase", "cpu"),
				func(context.Context) { keep(w.fn(deadline)) })
		}()
	}
	wg.Wait()
}

//go:noinline
func allocSmall(n int) [][]byte {
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, make([]byte, 32+i%64))
	}
	return out
}

//go:noinline
func allocLarge(n int) [][]byte {
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, make([]byte, 1<<16))
	}
	return out
}

//go:noinline
func allocStrings(n int) []string {
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("key-%d", i))
	}
	return out
}

func heapPhase() {
	retained = append(retained, allocSmall(2000)...)
	retained = append(retained, allocLarge(16)...)
	garbage := allocSmall(3000) // freed: alloc_* only
	keep(uint64(len(garbage)))
	keep(uint64(len(allocStrings(500))))
	runtime.GC()
}

//go:noinline
func contendMutex(mu *sync.Mutex, rounds int) {
	for i := 0; i < rounds; i++ {
		mu.Lock()
		time.Sleep(200 * time.Microsecond)
		mu.Unlock()
	}
}

//go:noinline
func waitChannel(ch chan int) int {
	return <-ch
}

//go:noinline
func waitGroup(wg *sync.WaitGroup) {
	wg.Wait()
}

func lockPhase() {
	ctx := context.Background()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			pprof.Do(ctx, pprof.Labels("phase", "lock"), func(context.Context) {
				contendMutex(&mu, 20)
			})
		}(g)
	}
	ch := make(chan int)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keep(uint64(waitChannel(ch)))
		}()
	}
	var gate sync.WaitGroup
	gate.Add(1)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waitGroup(&gate)
		}()
	}
	time.Sleep(20 * time.Millisecond)
	for g := 0; g < 4; g++ {
		ch <- g
	}
	gate.Done()
	wg.Wait()
}

//go:noinline
func parked(ch chan struct{}) {
	<-ch
}

func writeProfile(dir, name, profile string) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := pprof.Lookup(profile).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func run(dir string, cpu time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(1)

	if err := cpuProfile(dir, func() { cpuPhase(cpu) }); err != nil {
		return err
	}

	heapPhase()
	if err := writeProfile(dir, "heap.pb.gz", "heap"); err != nil {
		return err
	}

	lockPhase()
	if err := writeProfile(dir, "mutex.pb.gz", "mutex"); err != nil {
		return err
	}
	if err := writeProfile(dir, "block.pb.gz", "block"); err != nil {
		return err
	}

	release := make(chan struct{})
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := 0; g < 5; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			pprof.Do(ctx, pprof.Labels("pool", fmt.Sprintf("p%d", g%2)),
				func(context.Context) { parked(release) })
		}(g)
	}
	time.Sleep(20 * time.Millisecond)
	err := writeProfile(dir, "goroutine.pb.gz", "goroutine")
	close(release)
	wg.Wait()
	return err
}

func main() {
	out := flag.String("out", ".", "output directory")
	cpu := flag.Duration("cpu", 1500*time.Millisecond, "CPU phase duration")
	service := flag.Bool("service", false, "only a service's CPU profile")
	fibN := flag.Int("fib", 20, "-service: each request computes fib(N)")
	flag.Parse()
	start := time.Now()
	if *service {
		if err := servicePhase(*out, *cpu, *fibN); err != nil {
			fmt.Fprintln(os.Stderr, "genprof:", err)
			os.Exit(1)
		}
		fmt.Printf("genprof: wrote a service's cpu profile (fib %d) to %s in %.1fs (sink %d)\n",
			*fibN, *out, time.Since(start).Seconds(), sink%10)
		return
	}
	if err := run(*out, *cpu); err != nil {
		fmt.Fprintln(os.Stderr, "genprof:", err)
		os.Exit(1)
	}
	fmt.Printf("genprof: wrote cpu, heap, mutex, block, goroutine profiles to %s in %.1fs (sink %d)\n",
		*out, time.Since(start).Seconds(), sink%10)
}
