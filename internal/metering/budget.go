package metering

import (
	"slices"
)

// Budget is a spend limit's state: the thresholds (percent of the limit)
// that already alerted, and whether the limit was reached.
type Budget struct {
	Alerted  []float64
	Exceeded bool
}

// Step is what a check of a budget finds: alerts to raise (thresholds
// newly crossed, lowest first), whether the limit is newly reached, and
// the budget's state from now on. A limit raised above the spend re-arms
// the thresholds above the spend and clears Exceeded.
type Step struct {
	Alerts   []float64
	Exceeded bool
	Next     Budget
}

// Check compares spent with limit (limit > 0 or 0: any spend reaches it).
func Check(b Budget, spent, limit float64, thresholds []float64) Step {
	pct := 100.0
	if limit > 0 {
		pct = spent / limit * 100
	} else if spent <= 0 {
		pct = 0
	}
	var st Step
	for _, t := range b.Alerted {
		if pct >= t { // still crossed: stays alerted
			st.Next.Alerted = append(st.Next.Alerted, t)
		}
	}
	for _, t := range slices.Sorted(slices.Values(thresholds)) {
		if pct >= t && !slices.Contains(st.Next.Alerted, t) {
			st.Alerts = append(st.Alerts, t)
			st.Next.Alerted = append(st.Next.Alerted, t)
		}
	}
	slices.Sort(st.Next.Alerted)
	reached := limit >= 0 && spent >= limit && (limit > 0 || spent > 0)
	st.Exceeded = reached && !b.Exceeded
	st.Next.Exceeded = reached
	if st.Next.Alerted == nil {
		st.Next.Alerted = []float64{}
	}
	return st
}

// Reached reports whether spent is at or over limit.
func Reached(spent float64, limit *float64) bool {
	return limit != nil && spent >= *limit && (*limit > 0 || spent > 0)
}
