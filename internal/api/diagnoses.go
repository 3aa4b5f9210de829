package api

import (
	"net/http"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

// Diagnoses is what the diagnoses' endpoint reads: the open diagnoses, and
// the last closed ones, oldest first.
type Diagnoses interface {
	Open() []diagnosis.Diagnosis
	History() []diagnosis.Diagnosis
}

// diagnosisList is GET /api/v1/diagnoses's answer.
type diagnosisList struct {
	Open   []diagnosis.Diagnosis `json:"open"`
	Closed []diagnosis.Diagnosis `json:"closed"`
}

// registerDiagnoses serves GET /api/v1/diagnoses; without d, a 503 that
// says why.
func registerDiagnoses(rt *routes, d Diagnoses) {
	rt.handle("GET /api/v1/diagnoses", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if d == nil {
			writeError(w, http.StatusServiceUnavailable, "diagnoses are not made here: they need the probes' per-cgroup counters (see the observer's start-up log)")
			return
		}
		l := diagnosisList{Open: d.Open(), Closed: d.History()}
		if l.Open == nil {
			l.Open = []diagnosis.Diagnosis{}
		}
		if l.Closed == nil {
			l.Closed = []diagnosis.Diagnosis{}
		}
		writeJSON(w, http.StatusOK, l)
	}))
}
