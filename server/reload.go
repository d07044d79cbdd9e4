package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratebatch/ratebatch/config"
)

// configState is the configuration in force, its version (1 at start, one
// more at each reload that took) and when it was loaded.
type configState struct {
	cfg     *config.Config
	version int
	loaded  time.Time
}

// reloader re-reads the configuration on SIGHUP (Server.Reload).
type reloader struct {
	src   atomic.Pointer[config.Source] // nil: nothing to reload from
	mu    sync.Mutex                    // one reload at a time
	state atomic.Pointer[configState]
}

// ReloadFrom makes SIGHUP, and Reload, read the configuration again from
// src: the file, the environment and the flags it was first loaded from,
// in the same order of precedence.
func (p *Server) ReloadFrom(src config.Source) { p.reload.src.Store(&src) }

// current is the configuration in force.
func (p *Server) current() *configState { return p.reload.state.Load() }

// liveOption reports whether a reload applies the option at path (as
// config.Changed names it) without a restart: what the registry and the
// monitors own (policies, their options, budgets, queue and batch limits,
// per-model overrides), the log level and the routes open to clients
// (restricted_api). What the listeners, the
// upstream clients and the doors were built with waits for a restart.
func liveOption(path string) bool {
	switch {
	case path == "policy.window":
		return false // the monitors' window is their clock
	case strings.HasPrefix(path, "policy."), strings.HasPrefix(path, "models."),
		path == "limits.queue_rows", path == "log.level", path == "restricted_api":
		return true
	}
	return false
}

// Reload reads the configuration again from its source (ReloadFrom) and
// applies what can change live, leaving requests queued and in flight
// alone and keeping every model's monitor and the line it learnt. A file
// with any mistake is refused whole, its errors logged, and the running
// configuration kept. Options that cannot change live keep their running
// values, and a log line names them.
func (p *Server) Reload(ctx context.Context) error {
	r := &p.reload
	src := r.src.Load()
	if src == nil {
		return errors.New("reload: no configuration source (ReloadFrom)")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := config.Load(*src)
	if err != nil {
		p.log.Error("configuration reload refused; the running configuration is kept", "file", src.File, "err", err)
		return err
	}
	cur := r.state.Load()
	var applied, kept []string
	for _, path := range config.Changed(cur.cfg, next) {
		if liveOption(path) {
			applied = append(applied, path)
		} else {
			kept = append(kept, path)
		}
	}
	next.Keep(cur.cfg, kept)
	if len(kept) > 0 {
		p.log.Warn("configuration reload: these options take effect at restart only; their running values are kept", "options", kept)
	}
	if h, ok := p.log.Handler().(leveled); ok {
		h.level.Set(parseLevel(next.Log.Level))
	}
	if rules, err := next.RestrictedAPI.Rules(); err == nil { // validated by Load
		p.access.Set(rules)
	}
	// Every model takes the new configuration, changed or not: a budget
	// set at run time (PUT /policy) gives way to the file's.
	applyErr := p.models.Apply(ctx, next)
	if applyErr != nil {
		p.log.Warn("configuration reload: some models did not take it whole", "err", applyErr)
	}
	st := &configState{cfg: next, version: cur.version + 1, loaded: time.Now()}
	r.state.Store(st)
	p.log.Info("configuration reloaded", "version", st.version, "changed", applied)
	return applyErr
}

// hangups starts listening for SIGHUP. Run calls it before it discovers
// models or serves, not in reloadOnHangup's goroutine: a SIGHUP that came
// before that goroutine first ran would find no listener and end the
// process (the signal's default action), and a SIGHUP is sent as soon as
// the proxy answers (a reload right after a deploy).
func hangups() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// reloadOnHangup calls Reload at each SIGHUP on hup until ctx ends. It
// listens whether or not ReloadFrom was called, so that a SIGHUP never
// ends the process.
func (p *Server) reloadOnHangup(ctx context.Context, hup chan os.Signal) {
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			p.log.Info("SIGHUP: reloading the configuration")
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_ = p.Reload(rctx) // logged
			cancel()
		}
	}
}

// leveled is the handler NewLogger makes: its level can be changed
// (log.level on reload).
type leveled struct {
	slog.Handler
	level *slog.LevelVar
}

func parseLevel(s string) slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(s)) // validated by config
	return level
}
