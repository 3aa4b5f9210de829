package observer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

// maxDiagnosesBytes bounds the answer read: 1,100 diagnoses of a few KiB.
const maxDiagnosesBytes = 16 << 20

// Diagnose asks the observer at url for its diagnoses, for up to watch
// while none is open (a thrash about to be judged), and writes the open
// ones and the last closed ones (at most lastClosed) to w. It says how
// many are open.
func Diagnose(ctx context.Context, url string, watch time.Duration, lastClosed int, w io.Writer) (int, error) {
	url = strings.TrimSuffix(url, "/") + "/api/v1/diagnoses"
	deadline := time.Now().Add(watch)
	var l struct{ Open, Closed []diagnosis.Diagnosis }
	for {
		var err error
		if l.Open, l.Closed, err = fetchDiagnoses(ctx, url); err != nil {
			return 0, err
		}
		if len(l.Open) > 0 || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if len(l.Open) == 0 {
		fmt.Fprintf(w, "Nothing thrashes now (watched %s).\n", watch)
	} else {
		fmt.Fprintf(w, "Thrashing now (%d):\n\n", len(l.Open))
		if err := diagnosis.WriteText(w, l.Open); err != nil {
			return 0, err
		}
	}
	if n := min(lastClosed, len(l.Closed)); n > 0 {
		fmt.Fprintf(w, "\nThe last %d that ended, newest last:\n\n", n)
		if err := diagnosis.WriteText(w, l.Closed[len(l.Closed)-n:]); err != nil {
			return 0, err
		}
	}
	return len(l.Open), nil
}

func fetchDiagnoses(ctx context.Context, url string) (open, closed []diagnosis.Diagnosis, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("no observer answers at %s: %w (start one with make run or the unit, or give --url)", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDiagnosesBytes))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, nil, fmt.Errorf("%s: %s", url, e.Error)
		}
		return nil, nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var l struct{ Open, Closed []diagnosis.Diagnosis }
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, nil, fmt.Errorf("%s: not a list of diagnoses: %w", url, err)
	}
	if l.Open == nil {
		return nil, nil, errors.New(url + ": the answer has no list of open diagnoses: is this a thrashscope observer?")
	}
	return l.Open, l.Closed, nil
}
