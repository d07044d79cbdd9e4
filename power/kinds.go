package power

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// A Kind is an energy source the proxy can open, by the name power.source
// gives it. Each source registers its kind from its own file
// (RegisterKind, in an init function): the configuration accepts the
// registered names, serve opens the one configured, and a kind added in
// its own file needs no list edited elsewhere.
type Kind struct {
	// Name is the source's name in power.source.
	Name string
	// About says what the source reads, for power.source's help ("this
	// host's GPUs").
	About string
	// Open opens the source. Its options come with the defaults filled
	// in and the shared ones checked (Interval, Windows, GPUs not
	// empty); Open refuses what it alone cannot use (the triton source a
	// TritonMetricsURL that is no URL, NVML a GPU that does not exist),
	// saying which option is wrong.
	Open func(Options) (Source, error)
	// Missing, when not nil, says that this build leaves the source out
	// and what to do instead (an error wrapping ErrNotBuilt: NVML
	// without cgo); Open is then nil. The source is still named where
	// the others are, so that configuring it says why it cannot open,
	// and the configuration's help is the same in every build.
	Missing error
}

// ErrUnknownKind is wrapped by Open and LookupKind for a name no source
// registered.
var ErrUnknownKind = errors.New("unknown energy source")

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// RegisterKind makes a source available under k.Name (or, with Missing,
// says why this build does not have it). It is meant for init functions
// and panics on an empty name, a nil Open of a source that is not
// missing, or a name registered twice, programming errors.
func RegisterKind(k Kind) {
	if k.Name == "" || (k.Open == nil) == (k.Missing == nil) {
		panic("power: RegisterKind needs a name, and an Open or why the source is missing")
	}
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kinds[k.Name]; dup {
		panic("power: RegisterKind called twice for " + k.Name)
	}
	kinds[k.Name] = k
}

// Kinds lists the registered sources, by name, the missing ones included.
func Kinds() []Kind {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]Kind, 0, len(kinds))
	for _, name := range slices.Sorted(maps.Keys(kinds)) {
		out = append(out, kinds[name])
	}
	return out
}

// KindNames lists the registered sources' names, sorted, the missing ones
// included.
func KindNames() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	return slices.Sorted(maps.Keys(kinds))
}

// LookupKind is the source registered under name. A source this build
// leaves out is its Missing error, which says what to do instead; a name
// no source registered an error wrapping ErrUnknownKind.
func LookupKind(name string) (Kind, error) {
	kindsMu.RLock()
	k, ok := kinds[name]
	kindsMu.RUnlock()
	switch {
	case !ok:
		return Kind{}, fmt.Errorf("power: %w %q (known: %s)", ErrUnknownKind, name, strings.Join(KindNames(), ", "))
	case k.Missing != nil:
		return Kind{}, k.Missing
	}
	return k, nil
}

// Open returns the source registered under kind, opened with opts.
// Without an NVIDIA driver, "nvml" fails with an error wrapping
// ErrNoDriver; in a build without NVML it wraps ErrNotBuilt.
func Open(kind string, opts Options) (Source, error) {
	k, err := LookupKind(kind)
	if err != nil {
		return nil, err
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return k.Open(o)
}
