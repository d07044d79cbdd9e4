package power

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratebatch/ratebatch/internal/redact"
)

// Triton's GPU metric families (docs/user_guide/metrics.md of
// triton-inference-server/server), one series per GPU labelled gpu_uuid.
const (
	// tritonEnergy is a counter: joules since Triton started. Triton
	// registers it for every GPU but leaves it at 0 where DCGM has no
	// energy field, so 0 means "not measured (yet)".
	tritonEnergy = "nv_energy_consumption"
	// tritonPower is a gauge: board power in watts.
	tritonPower = "nv_gpu_power_usage"
	tritonLabel = "gpu_uuid"
	// maxScrapeBytes bounds one metrics page; Triton's is a few tens of KiB.
	maxScrapeBytes = 16 << 20
)

type tritonSource struct {
	url     string
	shown   string // url without its credentials (redact.URL), for errors
	client  *http.Client
	timeout time.Duration
	now     func() time.Time
	only    map[string]bool // selected UUIDs; nil means all
	order   []string        // selected UUIDs in the order given
	gpus    map[string]*jCounter
}

func init() {
	RegisterKind(Kind{Name: KindTriton, About: "the upstream's metrics endpoint", Open: openTriton})
}

func openTriton(o Options) (Source, error) {
	if o.TritonMetricsURL == "" {
		return nil, errors.New("power: triton: TritonMetricsURL is empty: give Triton's metrics endpoint, e.g. http://127.0.0.1:8002/metrics")
	}
	u, err := url.Parse(o.TritonMetricsURL)
	if err != nil {
		return nil, fmt.Errorf("power: triton: TritonMetricsURL %q: %w", redact.URL(o.TritonMetricsURL), err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("power: triton: TritonMetricsURL %q: want an http or https URL with a host", redact.URL(o.TritonMetricsURL))
	}
	s := &tritonSource{
		url:     u.String(),
		shown:   redact.URL(u.String()),
		client:  o.HTTPClient,
		timeout: o.Timeout,
		now:     o.Now,
		gpus:    make(map[string]*jCounter),
	}
	if s.client == nil {
		s.client = &http.Client{}
	}
	if len(o.GPUs) > 0 {
		s.only = make(map[string]bool, len(o.GPUs))
		for _, g := range o.GPUs {
			if _, err := strconv.Atoi(g); err == nil {
				return nil, fmt.Errorf("power: triton: GPU %q: the triton source selects GPUs by UUID (the gpu_uuid label of %s), not by index", g, tritonPower)
			}
			if s.only[g] {
				return nil, fmt.Errorf("power: triton: GPU %s selected twice", g)
			}
			s.only[g] = true
			s.order = append(s.order, g)
		}
	}
	return s, nil
}

func (s *tritonSource) Name() string { return KindTriton }

// settle: Triton republishes GPU metrics every --metrics-interval-ms (2 s by
// default) from readings that themselves average over up to a second.
func (s *tritonSource) settle() time.Duration { return 3 * time.Second }
func (s *tritonSource) Close() error          { return nil }

// gpuSeries holds what one scrape said about one GPU.
type gpuSeries struct {
	energy, power       float64
	hasEnergy, hasPower bool
}

func (s *tritonSource) Read(ctx context.Context) ([]Reading, error) {
	series, err := s.scrape(ctx)
	if err != nil {
		return nil, err
	}
	t := s.now()
	ids := s.order
	if ids == nil {
		ids = make([]string, 0, len(series))
		for id := range series {
			ids = append(ids, id)
		}
		sort.Strings(ids)
	}
	out := make([]Reading, 0, len(ids))
	var errs []error
	for _, id := range ids {
		g, ok := series[id]
		if !ok {
			errs = append(errs, &GPUError{GPU: id, Err: fmt.Errorf("no %s or %s series with %s=%q at %s", tritonEnergy, tritonPower, tritonLabel, id, s.shown)})
			continue
		}
		r, err := s.reading(id, g, t)
		if r.HasEnergy || r.HasPower {
			out = append(out, r)
		}
		if err != nil {
			errs = append(errs, &GPUError{GPU: id, Err: err})
		}
	}
	return out, errors.Join(errs...)
}

func (s *tritonSource) reading(id string, g gpuSeries, t time.Time) (Reading, error) {
	r := Reading{Time: t, GPU: id}
	c := s.gpus[id]
	if c == nil {
		c = new(jCounter)
		s.gpus[id] = c
	}
	var errs []error
	switch {
	case !g.hasEnergy:
	case math.IsNaN(g.energy) || math.IsInf(g.energy, 0) || g.energy < 0:
		errs = append(errs, fmt.Errorf("%s is %v: want a finite value >= 0", tritonEnergy, g.energy))
	case g.energy == 0:
		// Unsupported, or Triton has not taken its first two DCGM samples.
		c.restart()
	default:
		r.EnergyJ, r.Discontinuity = c.observe(g.energy, t)
		r.HasEnergy = true
	}
	if g.hasPower {
		if math.IsNaN(g.power) || math.IsInf(g.power, 0) || g.power < 0 {
			errs = append(errs, fmt.Errorf("%s is %v: want a finite value >= 0", tritonPower, g.power))
		} else {
			r.PowerW, r.HasPower = g.power, true
		}
	}
	if !r.HasEnergy && !r.HasPower && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s is 0 (not measured) and there is no %s series", tritonEnergy, tritonPower))
	}
	return r, errors.Join(errs...)
}

// scrape fetches the metrics page and extracts the two GPU families.
func (s *tritonSource) scrape(ctx context.Context) (map[string]gpuSeries, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("power: triton: %w", err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error // it would repeat the URL, its query included
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("power: triton: scraping %s: %w", s.shown, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("power: triton: scraping %s: status %s", s.shown, resp.Status)
	}
	series := make(map[string]gpuSeries)
	err = parseExposition(io.LimitReader(resp.Body, maxScrapeBytes), func(name string) bool {
		return name == tritonEnergy || name == tritonPower
	}, func(name string, labels []labelPair, v float64) {
		id := labelValue(labels, tritonLabel)
		if id == "" {
			return
		}
		g := series[id]
		if name == tritonEnergy {
			g.energy, g.hasEnergy = v, true
		} else {
			g.power, g.hasPower = v, true
		}
		series[id] = g
	})
	if err != nil {
		return nil, fmt.Errorf("power: triton: parsing %s: %w", s.shown, err)
	}
	if len(series) == 0 {
		return nil, fmt.Errorf("power: triton: %s has no %s or %s series with a %s label: is Triton running with --allow-gpu-metrics=true on a GPU host?", s.shown, tritonEnergy, tritonPower, tritonLabel)
	}
	return series, nil
}

type labelPair struct{ name, value string }

func labelValue(labels []labelPair, name string) string {
	for _, l := range labels {
		if l.name == name {
			return l.value
		}
	}
	return ""
}

// parseExposition reads a page in the Prometheus text format with
// Prometheus's own parser and calls fn for every sample of the families
// want accepts, in the order the page lists them.
func parseExposition(r io.Reader, want func(name string) bool, fn func(name string, labels []labelPair, v float64)) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(fams))
	for name := range fams {
		if want(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		f := fams[name]
		for _, m := range f.GetMetric() {
			labels := make([]labelPair, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, labelPair{l.GetName(), l.GetValue()})
			}
			fn(name, labels, sampleValue(f.GetType(), m))
		}
	}
	return nil
}

// sampleValue is the value of a gauge, counter or untyped sample, the
// kinds Triton's GPU families are; other kinds count as NaN.
func sampleValue(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}
