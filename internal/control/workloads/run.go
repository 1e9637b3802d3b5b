package workloads

import (
	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
)

// Run is a stored workload's run as its program starts: what
// newWorkload checked at submit, read back from the workload (an
// imported image is found again by its template name).
func Run(wl api.Workload) runs.Spec {
	return runs.Spec{
		Kind: runs.Workload, TeamID: wl.TeamID, Template: wl.Template,
		Resources: api.Resources{CPUs: wl.Resources.CPUs, MemoryMiB: wl.Resources.MemoryMiB, DiskMiB: wl.Resources.DiskMiB},
		GPUs:      wl.Resources.GPUs, GPUType: wl.Resources.GPUType,
		Command: wl.Command, Argv: wl.Argv, Env: wl.Env, Secrets: wl.Secrets, User: wl.User,
		Workdir: wl.Workdir, Source: wl.Source, Network: api.NetworkPolicy{Allow: []string{}},
		TimeoutS: wl.TimeoutS,
	}
}
