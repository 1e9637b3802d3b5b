package lifecycle

import (
	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/teams"
)

// Names the API and the CLI know the teams' types by.
type (
	// Principal is who a request acts as.
	Principal = teams.Principal
	// Answer is a response to replay for an Idempotency-Key.
	Answer = teams.Answer
)

// AdminTeam is the name of the team created at first start.
const AdminTeam = teams.AdminTeam

// AdmissionFlags are the names of the admission flags.
var AdmissionFlags = teams.AdmissionFlags

// ParseAdmission reads a comma-separated list of admission flags.
func ParseAdmission(s string) (api.Admission, error) { return teams.ParseAdmission(s) }
