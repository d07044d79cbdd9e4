// Command grpcflood floods a gRPC door (ratebatch's, or Triton's own) as an
// attacker would, and measures the server's resident set size (VmRSS and
// VmHWM in /proc) while it does: scripts/grpcflood.sh runs it against
// `ratebatch serve`, and docs/results/memory-under-attack.md records the
// figures.
//
// Modes:
//
//	-mode inputs   -callers C -inputs N: C callers each send ModelInfer
//	               calls of N one-byte inputs, back to back, for -duration:
//	               a message that costs many times its size to decode.
//	-mode streams  -conns K -streams S -msg B: K connections, S
//	               ModelStreamInfer streams on each, every stream sending
//	               one message of B bytes and holding the stream open for
//	               -duration: relayed calls that hold their messages (the
//	               upstream, -stub, never reads them).
//	-stub ADDR     serve, until killed, a gRPC upstream that accepts every
//	               call and never reads or answers it.
//
// It prints one JSON object: the calls' outcomes by gRPC code, and the
// server's RSS before, at its sampled peak, and its high-water mark.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/lab/procmem"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcflood:", err)
		os.Exit(1)
	}
}

// Result is what one flood measured; sizes are KiB of the server's RSS.
type Result struct {
	Mode     string         `json:"mode"`
	Settings string         `json:"settings"`
	Calls    int            `json:"calls"`
	Codes    map[string]int `json:"codes"`
	RestKiB  int64          `json:"rest_kib"`
	PeakKiB  int64          `json:"peak_sampled_kib"`
	HWMKiB   int64          `json:"vmhwm_kib"`
	Alive    bool           `json:"server_alive"`
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("grpcflood", flag.ContinueOnError)
	stub := fs.String("stub", "", "serve a gRPC upstream that never reads or answers, on this address, until killed")
	addr := fs.String("addr", "127.0.0.1:9001", "the gRPC door's address")
	pid := fs.Int("pid", 0, "the server's process id, whose memory is read (required)")
	mode := fs.String("mode", "inputs", "inputs or streams")
	model := fs.String("model", "simple", "the model called")
	callers := fs.Int("callers", 64, "inputs: callers at once")
	inputs := fs.Int("inputs", 1024, "inputs: one-byte inputs of each call")
	conns := fs.Int("conns", 8, "streams: connections")
	streams := fs.Int("streams", 1024, "streams: streams on each connection")
	msg := fs.Int("msg", 64<<10, "streams: bytes of each stream's message")
	duration := fs.Duration("duration", 10*time.Second, "how long the flood lasts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *stub != "" {
		return serveStub(*stub)
	}
	if *pid == 0 {
		return errors.New("-pid is required: the server process whose memory is measured")
	}
	res := &Result{Mode: *mode, Codes: map[string]int{}}
	var err error
	if res.RestKiB, err = procmem.KiB(*pid, "VmRSS"); err != nil {
		return err
	}
	// Cancelled, not a deadline: a deadline would travel with each call
	// (grpc-timeout), and the server would end the calls out at the end
	// itself.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(*duration, cancel)
	stop := sample(*pid, &res.PeakKiB)
	switch *mode {
	case "inputs":
		res.Settings = fmt.Sprintf("%d callers, %d inputs a call", *callers, *inputs)
		err = floodInputs(ctx, *addr, *model, *callers, *inputs, res)
	case "streams":
		res.Settings = fmt.Sprintf("%d connections x %d streams, %d bytes a message", *conns, *streams, *msg)
		err = floodStreams(ctx, *addr, *conns, *streams, *msg, res)
	default:
		err = fmt.Errorf("-mode %q: want inputs or streams", *mode)
	}
	stop()
	if err != nil {
		return err
	}
	res.HWMKiB, _ = procmem.KiB(*pid, "VmHWM")
	_, perr := procmem.KiB(*pid, "VmRSS")
	res.Alive = perr == nil
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// outcomes counts calls by their gRPC code.
type outcomes struct {
	mu  sync.Mutex
	res *Result
}

func (o *outcomes) add(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.res.Calls++
	o.res.Codes[status.Code(err).String()]++
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcwire.Codec{}), grpc.MaxCallSendMsgSize(1<<30)))
}

// floodInputs sends calls of n one-byte inputs from callers goroutines
// on one connection each until ctx ends.
func floodInputs(ctx context.Context, addr, model string, callers, n int, res *Result) error {
	m := &pb.ModelInferRequest{ModelName: model}
	for i := range n {
		m.Inputs = append(m.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "x" + strconv.Itoa(i), Datatype: "INT8", Shape: []int64{1, 1}})
		m.RawInputContents = append(m.RawInputContents, []byte{1})
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	o := &outcomes{res: res}
	var wg sync.WaitGroup
	for range callers {
		cc, err := dial(addr)
		if err != nil {
			return err
		}
		defer cc.Close()
		wg.Go(func() {
			for ctx.Err() == nil {
				err := cc.Invoke(ctx, "/inference.GRPCInferenceService/ModelInfer", &grpcwire.Frame{B: b}, &grpcwire.Frame{})
				if ctx.Err() == nil {
					o.add(err)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// floodStreams opens streams on conns connections, each sending one
// message of size bytes and holding its stream open until ctx ends; a
// stream's outcome is how it ended before then (OK: still open).
func floodStreams(ctx context.Context, addr string, conns, streams, size int, res *Result) error {
	o := &outcomes{res: res}
	msg := make([]byte, size)
	var wg sync.WaitGroup
	for range conns {
		cc, err := dial(addr)
		if err != nil {
			return err
		}
		defer cc.Close()
		for range streams {
			wg.Go(func() {
				st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/inference.GRPCInferenceService/ModelStreamInfer")
				if err == nil {
					err = st.SendMsg(&grpcwire.Frame{B: msg})
				}
				if err == nil || err == io.EOF { // EOF: ended by the server, whose status RecvMsg reads
					err = st.RecvMsg(&grpcwire.Frame{}) // blocks while the stream is held
				}
				if ctx.Err() != nil {
					err = nil // held until the end
				}
				o.add(err)
			})
		}
	}
	wg.Wait()
	return nil
}

// serveStub serves a gRPC upstream that takes every call and holds it
// unread and unanswered until the client goes.
func serveStub(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(grpcwire.Codec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		<-ss.Context().Done()
		return ss.Context().Err()
	}))
	return srv.Serve(ln)
}

// sample reads the server's VmRSS every 50 ms into *peak until stopped.
func sample(pid int, peak *int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := procmem.KiB(pid, "VmRSS"); err == nil && v > *peak {
				*peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}
