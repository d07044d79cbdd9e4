package emulator

import (
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"

	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

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
// and models (`ratebatch emulate`, JSON with --json).
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
