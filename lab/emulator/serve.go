package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"

	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// Addrs are where Serve listens and how it tells so.
type Addrs struct {
	// Listen is the KServe v2 HTTP API's address (Triton's port 8000).
	Listen string
	// Metrics is GET /metrics' address (Triton's port 8002); "" serves none.
	Metrics string
	// GRPC is the gRPC door's address (Triton's port 8001); "" serves none.
	GRPC string
	// Realism is the Realism's name, for the banner.
	Realism string
	// JSON writes the banner as one line of JSON, which scripts read to
	// learn the bound addresses (a port 0 is chosen by the system).
	JSON bool
	// Grace bounds how long answers in flight may take once ctx ends.
	Grace time.Duration
}

// Serve serves s on a's addresses until ctx ends (`ratebatch emulate`):
// once every door listens it writes the Banner to out, and when ctx ends
// it lets the answers in flight go out within a.Grace. An error is a
// listen failure, an unwritable banner or a shutdown that ran out of grace.
func (s *Server) Serve(ctx context.Context, a Addrs, out io.Writer) error {
	if err := s.Start(a.Listen, a.Metrics); err != nil {
		return err
	}
	var grpcAddr string
	if a.GRPC != "" {
		addr, stop, err := s.ServeGRPC(a.GRPC)
		if err != nil {
			s.Close()
			return err
		}
		grpcAddr = addr
		defer stop(a.Grace) // within the grace the HTTP door has too
	}
	banner := s.Banner(a.Realism, grpcAddr)
	if a.JSON {
		if err := json.NewEncoder(out).Encode(banner); err != nil {
			s.Close()
			return fmt.Errorf("emulator: writing the addresses: %w", err)
		}
	} else {
		banner.WriteText(out)
	}
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.Grace)
	defer cancel()
	if err := s.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("emulator: stopping: %w", err)
	}
	return nil
}

// ServeGRPC serves the gRPC door (GRPC) on addr, beside Start's HTTP
// ports, until stop: stop lets answers in flight go out within grace,
// then cuts the rest. It returns the bound address.
func (s *Server) ServeGRPC(addr string) (bound string, stop func(grace time.Duration), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("emulator: listen on %q (--grpc-listen): %w", addr, err)
	}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, s.GRPC())
	go srv.Serve(ln) // returns once stopped
	return ln.Addr().String(), func(grace time.Duration) {
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			srv.Stop()
		}
	}, nil
}

// Banner is what a serving emulator tells its user: its addresses, preset
// and models (`ratebatch emulate`, JSON with --json). The JSON keys are a
// contract: scripts read them.
type Banner struct {
	Listen        string   `json:"listen"`
	MetricsListen string   `json:"metrics_listen"`
	Preset        string   `json:"preset"`
	Models        []string `json:"models"`
	Energy        bool     `json:"energy"`
	Realism       string   `json:"realism"`
	GRPCListen    string   `json:"grpc_listen,omitempty"`
}

// Banner describes the started server; realism is its Realism's name and
// grpcAddr ServeGRPC's address ("" without).
func (s *Server) Banner(realism, grpcAddr string) Banner {
	p := s.Profile()
	return Banner{s.Addr(), s.MetricsAddr(), p.Name, s.Models(), p.HasEnergy, realism, grpcAddr}
}

// WriteText prints the banner as lines of text.
func (b Banner) WriteText(w io.Writer) {
	fmt.Fprintf(w, "emulating %s (%s) on http://%s (models %v)\n", b.Preset, b.Realism, b.Listen, b.Models)
	if b.GRPCListen != "" {
		fmt.Fprintf(w, "gRPC on %s\n", b.GRPCListen)
	}
	if b.MetricsListen != "" {
		fmt.Fprintf(w, "metrics on http://%s/metrics\n", b.MetricsListen)
	}
	if !b.Energy {
		fmt.Fprintf(w, "preset %s has no published energy figures: no energy or power metrics are exported\n", b.Preset)
	}
}
