package apischema

import (
	"reflect"

	"github.com/cove-dev/cove/api"
)

// component names the schema of one Go type in components.schemas.
type component struct {
	name string
	typ  reflect.Type
	// closed writes additionalProperties false: the server refuses a
	// body with fields the type does not have (httpapi decodes with
	// DisallowUnknownFields).
	closed bool
}

// components are the named schemas, in the document's order. A type used
// by a field is a $ref to its component when it has one here, and inline
// otherwise. The names are the contract's: the SDKs' field checks find
// their schemas by them.
var components = []component{
	{name: "Error", typ: reflect.TypeFor[api.Error]()},
	{name: "ErrorResponse", typ: reflect.TypeFor[api.ErrorResponse]()},
	{name: "SandboxState", typ: reflect.TypeFor[api.SandboxState]()},
	{name: "Resources", typ: reflect.TypeFor[api.Resources]()},
	{name: "ResourcesRequest", typ: reflect.TypeFor[api.ResourcesRequest](), closed: true},
	{name: "NetworkPolicy", typ: reflect.TypeFor[api.NetworkPolicy](), closed: true},
	{name: "NetworkPolicyRequest", typ: reflect.TypeFor[api.NetworkPolicyRequest](), closed: true},
	{name: "Source", typ: reflect.TypeFor[api.Source](), closed: true},
	{name: "Setup", typ: reflect.TypeFor[api.Setup](), closed: true},
	{name: "Sandbox", typ: reflect.TypeFor[api.Sandbox]()},
	{name: "CreateSandboxRequest", typ: reflect.TypeFor[api.CreateSandboxRequest](), closed: true},
	{name: "CommandState", typ: reflect.TypeFor[api.CommandState]()},
	{name: "PTY", typ: reflect.TypeFor[api.PTY](), closed: true},
	{name: "Command", typ: reflect.TypeFor[api.Command]()},
	{name: "CreateCommandRequest", typ: reflect.TypeFor[api.CreateCommandRequest](), closed: true},
	{name: "CommandResult", typ: reflect.TypeFor[api.CommandResult]()},
	{name: "OutputRecord", typ: reflect.TypeFor[api.OutputRecord]()},
	{name: "SignalRequest", typ: reflect.TypeFor[api.SignalRequest](), closed: true},
	{name: "Admission", typ: reflect.TypeFor[api.Admission]()},
	{name: "Team", typ: reflect.TypeFor[api.Team]()},
	{name: "CreateTeamRequest", typ: reflect.TypeFor[api.CreateTeamRequest](), closed: true},
	{name: "CreateKeyRequest", typ: reflect.TypeFor[api.CreateKeyRequest](), closed: true},
	{name: "CreateTeamResponse", typ: reflect.TypeFor[api.CreateTeamResponse]()},
	{name: "KeyResponse", typ: reflect.TypeFor[api.KeyResponse]()},
	{name: "SandboxList", typ: reflect.TypeFor[api.List[api.Sandbox]]()},
	{name: "CommandList", typ: reflect.TypeFor[api.List[api.Command]]()},
	{name: "TeamList", typ: reflect.TypeFor[api.List[api.Team]]()},
	{name: "Event", typ: reflect.TypeFor[api.Event]()},
	{name: "EventList", typ: reflect.TypeFor[api.List[api.Event]]()},
	{name: "FileEntry", typ: reflect.TypeFor[api.FileEntry]()},
	{name: "FileList", typ: reflect.TypeFor[api.List[api.FileEntry]]()},
	{name: "EditFileRequest", typ: reflect.TypeFor[api.EditFileRequest](), closed: true},
	{name: "MkdirRequest", typ: reflect.TypeFor[api.MkdirRequest](), closed: true},
	{name: "MoveRequest", typ: reflect.TypeFor[api.MoveRequest](), closed: true},
	{name: "ArchiveResult", typ: reflect.TypeFor[api.ArchiveResult]()},
	{name: "FileEvent", typ: reflect.TypeFor[api.FileEvent]()},
	{name: "NetworkObservation", typ: reflect.TypeFor[api.NetworkObservation]()},
	{name: "NetworkView", typ: reflect.TypeFor[api.NetworkView]()},
	{name: "UpdateSandboxRequest", typ: reflect.TypeFor[api.UpdateSandboxRequest](), closed: true},
	{name: "CreateTicketRequest", typ: reflect.TypeFor[api.CreateTicketRequest](), closed: true},
	{name: "Ticket", typ: reflect.TypeFor[api.Ticket]()},
	{name: "Secret", typ: reflect.TypeFor[api.Secret]()},
	{name: "PutSecretRequest", typ: reflect.TypeFor[api.PutSecretRequest](), closed: true},
	{name: "SecretList", typ: reflect.TypeFor[api.List[api.Secret]]()},
	{name: "PricePerHour", typ: reflect.TypeFor[api.PricePerHour]()},
	{name: "MetricSample", typ: reflect.TypeFor[api.MetricSample]()},
	{name: "MetricsGap", typ: reflect.TypeFor[api.MetricsGap]()},
	{name: "Metrics", typ: reflect.TypeFor[api.Metrics]()},
	{name: "Usage", typ: reflect.TypeFor[api.Usage]()},
	{name: "SandboxUsage", typ: reflect.TypeFor[api.SandboxUsage]()},
	{name: "UsageReport", typ: reflect.TypeFor[api.UsageReport]()},
	{name: "UpdateTeamRequest", typ: reflect.TypeFor[api.UpdateTeamRequest](), closed: true},
	{name: "Asset", typ: reflect.TypeFor[api.Asset](), closed: true},
	{name: "AssetList", typ: reflect.TypeFor[api.List[api.Asset]]()},
	{name: "SaveAssetRequest", typ: reflect.TypeFor[api.SaveAssetRequest](), closed: true},
	{name: "Webhook", typ: reflect.TypeFor[api.Webhook]()},
	{name: "CreateWebhookRequest", typ: reflect.TypeFor[api.CreateWebhookRequest](), closed: true},
	{name: "CreateWebhookResponse", typ: reflect.TypeFor[api.CreateWebhookResponse]()},
	{name: "DeliveryAttempt", typ: reflect.TypeFor[api.DeliveryAttempt]()},
	{name: "Delivery", typ: reflect.TypeFor[api.Delivery]()},
	{name: "WebhookList", typ: reflect.TypeFor[api.List[api.Webhook]]()},
	{name: "DeliveryList", typ: reflect.TypeFor[api.List[api.Delivery]]()},
	{name: "TeamLimits", typ: reflect.TypeFor[api.TeamLimits]()},
	{name: "TeamMe", typ: reflect.TypeFor[api.TeamMe]()},
	{name: "Preview", typ: reflect.TypeFor[api.Preview]()},
	{name: "CreatePreviewRequest", typ: reflect.TypeFor[api.CreatePreviewRequest](), closed: true},
	{name: "PreviewList", typ: reflect.TypeFor[api.List[api.Preview]]()},
	{name: "SelfTestResult", typ: reflect.TypeFor[api.SelfTestResult]()},
	{name: "SelfTest", typ: reflect.TypeFor[api.SelfTest]()},
	{name: "Template", typ: reflect.TypeFor[api.Template]()},
	{name: "TemplateList", typ: reflect.TypeFor[api.List[api.Template]]()},
	{name: "ImageConfig", typ: reflect.TypeFor[api.ImageConfig]()},
	{name: "ImageDefaults", typ: reflect.TypeFor[api.ImageDefaults]()},
	{name: "ImageLimits", typ: reflect.TypeFor[api.ImageLimits]()},
	{name: "ImageAdmission", typ: reflect.TypeFor[api.ImageAdmission]()},
	{name: "ImageSettings", typ: reflect.TypeFor[api.ImageSettings](), closed: true},
	{name: "Image", typ: reflect.TypeFor[api.Image]()},
	{name: "ImageList", typ: reflect.TypeFor[api.List[api.Image]]()},
	{name: "WorkloadResources", typ: reflect.TypeFor[api.WorkloadResources](), closed: true},
	{name: "WorkloadResourcesRequest", typ: reflect.TypeFor[api.WorkloadResourcesRequest](), closed: true},
	{name: "CreateWorkloadRequest", typ: reflect.TypeFor[api.CreateWorkloadRequest](), closed: true},
	{name: "Workload", typ: reflect.TypeFor[api.Workload]()},
	{name: "WorkloadList", typ: reflect.TypeFor[api.List[api.Workload]]()},
	{name: "SandboxNode", typ: reflect.TypeFor[api.SandboxNode]()},
	{name: "NodeCapacity", typ: reflect.TypeFor[api.NodeCapacity]()},
	{name: "Node", typ: reflect.TypeFor[api.Node]()},
	{name: "NodeList", typ: reflect.TypeFor[api.List[api.Node]]()},
	{name: "JoinToken", typ: reflect.TypeFor[api.JoinToken]()},
	{name: "Snapshot", typ: reflect.TypeFor[api.Snapshot]()},
	{name: "SnapshotList", typ: reflect.TypeFor[api.List[api.Snapshot]]()},
	{name: "CreateSnapshotRequest", typ: reflect.TypeFor[api.CreateSnapshotRequest](), closed: true},
	{name: "RestoreSandboxRequest", typ: reflect.TypeFor[api.RestoreSandboxRequest](), closed: true},
	{name: "ForkSandboxRequest", typ: reflect.TypeFor[api.ForkSandboxRequest](), closed: true},
	{name: "ForkResult", typ: reflect.TypeFor[api.ForkResult]()},
	{name: "VolumeMount", typ: reflect.TypeFor[api.VolumeMount](), closed: true},
	{name: "Volume", typ: reflect.TypeFor[api.Volume]()},
	{name: "VolumeList", typ: reflect.TypeFor[api.List[api.Volume]]()},
	{name: "CreateVolumeRequest", typ: reflect.TypeFor[api.CreateVolumeRequest](), closed: true},
}
