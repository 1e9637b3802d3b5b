package lifecycle

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

func TestRefuseSandboxGPUs(t *testing.T) {
	if err := refuseSandboxGPUs(api.CreateSandboxRequest{}); err != nil {
		t.Errorf("no resources: %v", err)
	}
	err := refuseSandboxGPUs(api.CreateSandboxRequest{Resources: &api.ResourcesRequest{GPUs: 2}})
	if api.ErrorCode(err) != api.CodeUnprocessable || !strings.Contains(err.Error(), "POST /v1/workloads") || !strings.Contains(err.Error(), "CPU-based") {
		t.Errorf("gpus 2: %v", err)
	}
	if err := refuseSandboxGPUs(api.CreateSandboxRequest{Resources: &api.ResourcesRequest{GPUs: -1}}); api.ErrorCode(err) != api.CodeInvalidArgument {
		t.Errorf("gpus -1: %v", err)
	}
}
