package cove

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// operations maps every operation of api/openapi.json to the Client method
// that offers it. An operation the SDK does not offer is listed with an
// empty method and a reason in notOffered.
var operations = map[string]string{
	"getOpenAPI":     "OpenAPI",
	"createSandbox":  "CreateSandbox",
	"createAsset":    "CreateAsset",
	"listAssets":     "ListAssets",
	"getAsset":       "GetAsset",
	"assetContent":   "ReadAsset",
	"deleteAsset":    "DeleteAsset",
	"createSnapshot": "CreateSnapshot", "listSnapshots": "ListSnapshots", "getSnapshot": "GetSnapshot",
	"deleteSnapshot": "DeleteSnapshot", "restoreSandbox": "RestoreSandbox", "forkSandbox": "ForkSandbox",
	"createVolume": "CreateVolume", "listVolumes": "ListVolumes", "getVolume": "GetVolume", "deleteVolume": "DeleteVolume",
	"saveAsset":        "SaveAsset",
	"listSandboxes":    "ListSandboxes",
	"getSandbox":       "GetSandbox",
	"terminateSandbox": "TerminateSandbox",
	"updateSandbox":    "UpdateSandbox",
	"sleepSandbox":     "SleepSandbox",
	"wakeSandbox":      "WakeSandbox",
	"createCommand":    "Exec",
	"listCommands":     "ListCommands",
	"getCommand":       "GetCommand",
	"commandOutput":    "Output",
	"commandStdout":    "Stdout",
	"commandStderr":    "Stderr",
	"commandStdin":     "Stdin",
	"commandSignal":    "Signal",
	"attachCommand":    "Attach",
	"createTeam":       "CreateTeam",
	"listTeams":        "ListTeams",
	"createKey":        "CreateKey",
	"revokeKey":        "RevokeKey",
	"listEvents":       "Events",
	"streamEvents":     "FollowEvents",
	"listFiles":        "ListFiles",
	"removeFile":       "RemoveFile",
	"statFile":         "StatFile",
	"readFile":         "ReadFile",
	"writeFile":        "WriteFile",
	"editFile":         "EditFile",
	"makeDirectory":    "Mkdir",
	"moveFile":         "MoveFile",
	"readArchive":      "ReadArchive",
	"writeArchive":     "WriteArchive",
	"watchFiles":       "WatchFiles",
	"sandboxNetwork":   "Network",
	"createTicket":     "CreateTicket",
	"putSecret":        "PutSecret",
	"getSecret":        "GetSecret",
	"listSecrets":      "ListSecrets",
	"deleteSecret":     "DeleteSecret",
	"sandboxMetrics":   "Metrics",
	"sandboxUsage":     "SandboxUsage",
	"usage":            "Usage",
	"updateTeam":       "UpdateTeam",
	"createWebhook":    "CreateWebhook",
	"listNodes":        "ListNodes",
	"drainNode":        "DrainNode",
	"undrainNode":      "UndrainNode",
	"removeNode":       "RemoveNode",
	"rotateJoinToken":  "RotateJoinToken",
	"listWebhooks":     "ListWebhooks",
	"getWebhook":       "GetWebhook",
	"deleteWebhook":    "DeleteWebhook",
	"listDeliveries":   "ListDeliveries",
	"createPreview":    "CreatePreview",
	"listPreviews":     "Previews",
	"deletePreview":    "DeletePreview",
	"listTemplates":    "Templates",
	"teamMe":           "Admission",
	"importImage":      "ImportImage",
	"listImages":       "Images",
	"getImage":         "GetImage",
	"updateImage":      "UpdateImage",
	"deleteImage":      "DeleteImage",
	"submitWorkload":   "SubmitWorkload",
	"listWorkloads":    "ListWorkloads",
	"getWorkload":      "GetWorkload",
	"cancelWorkload":   "CancelWorkload",
	"workloadOutput":   "WorkloadOutput",
	"workloadStdout":   "WorkloadStdout",
	"workloadStderr":   "WorkloadStderr",
}

// notOffered names operations the Go SDK leaves out on purpose, and why.
var notOffered = map[string]string{
	"metrics":       "Prometheus text for operators' scrapers, not for a team's program",
	"previewGet":    "a preview's traffic is the app's own HTTP: any HTTP client, with the URL and token CreatePreview answers",
	"previewPost":   "a preview's traffic is the app's own HTTP",
	"previewPut":    "a preview's traffic is the app's own HTTP",
	"previewPatch":  "a preview's traffic is the app's own HTTP",
	"previewDelete": "a preview's traffic is the app's own HTTP",
}

// TestContract checks the SDK against the API's OpenAPI document: every
// operation is offered by a method of Client that exists, or is listed as
// not offered. A new operation, or a removed method, fails it.
func TestContract(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	methods := clientMethods(t)
	var ops []string
	for path, item := range doc.Paths {
		for verb, raw := range item {
			switch verb {
			case "get", "put", "post", "delete", "patch", "head", "options":
			default:
				continue // parameters, summary, …
			}
			var op struct {
				OperationID string `json:"operationId"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", verb, path, err)
			}
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId", strings.ToUpper(verb), path)
				continue
			}
			ops = append(ops, op.OperationID)
		}
	}
	sort.Strings(ops)
	seen := map[string]bool{}
	for _, op := range ops {
		seen[op] = true
		if _, ok := notOffered[op]; ok {
			continue
		}
		m, ok := operations[op]
		if !ok {
			t.Errorf("operation %s has no Client method: add one (and map it here) or list it in notOffered with a reason", op)
			continue
		}
		if !methods[m] {
			t.Errorf("operation %s maps to Client.%s, which does not exist", op, m)
		}
	}
	for op := range operations {
		if !seen[op] {
			t.Errorf("operations maps %s, which api/openapi.json does not have", op)
		}
	}
}

// clientMethods lists the exported methods of *Client in this package's
// sources.
func clientMethods(t *testing.T) map[string]bool {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 || !fd.Name.IsExported() {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Client" {
					out[fd.Name.Name] = true
				}
			}
		}
	}
	return out
}
