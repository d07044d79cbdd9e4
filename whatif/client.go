package whatif

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Ask asks a running proxy's admin port (admin: its base URL) for a
// what-if and waits for the answer, asking again while it runs (202) or
// while another runs (429), as Retry-After says; progress, when set,
// hears each wait. The raw JSON comes back with the report.
func Ask(ctx context.Context, client *http.Client, admin, model string, minutes, p99Ms float64, progress func(Progress)) (Report, []byte, error) {
	q := url.Values{"wait": {"20s"}}
	if model != "" {
		q.Set("model", model)
	}
	if minutes > 0 {
		q.Set("minutes", strconv.FormatFloat(minutes, 'g', -1, 64))
	}
	if p99Ms > 0 {
		q.Set("p99_ms", strconv.FormatFloat(p99Ms, 'g', -1, 64))
	}
	u := strings.TrimSuffix(admin, "/") + "/whatif?" + q.Encode()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return Report{}, nil, err
		}
		res, err := client.Do(req)
		if err != nil {
			return Report{}, nil, err
		}
		body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
		res.Body.Close()
		if err != nil {
			return Report{}, nil, err
		}
		switch res.StatusCode {
		case http.StatusOK:
			var rep Report
			if err := json.Unmarshal(body, &rep); err != nil {
				return Report{}, body, fmt.Errorf("%s: %w", u, err)
			}
			return rep, body, nil
		case http.StatusAccepted, http.StatusTooManyRequests:
			var p Progress
			if json.Unmarshal(body, &p) == nil && progress != nil && res.StatusCode == http.StatusAccepted {
				progress(p)
			}
			wait, _ := strconv.Atoi(res.Header.Get("Retry-After"))
			select {
			case <-time.After(time.Duration(max(wait, 1)) * time.Second):
			case <-ctx.Done():
				return Report{}, nil, ctx.Err()
			}
		default:
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(body, &e) != nil || e.Error == "" {
				e.Error = strings.TrimSpace(string(body))
			}
			return Report{}, body, fmt.Errorf("%s: %s: %s", u, res.Status, e.Error)
		}
	}
}
