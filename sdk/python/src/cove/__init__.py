"""cove: Linux sandboxes for AI agents.

    import cove
    with cove.Client() as client, client.create(name="demo") as sb:
        print(sb.run("python3 -c 'print(6*7)'").stdout)
"""

from .aio import AsyncClient, AsyncCommand, AsyncFiles, AsyncSandbox
from ._shared import Retry
from .client import Client, Command, Files, SandboxHandle
from .errors import (
    BudgetExceeded, Conflict, CoveError, DigestMismatch, InsufficientStorage, Internal, InvalidArgument, NotFound,
    PayloadTooLarge, PermissionDenied, PreconditionFailed, ResourceExhausted, Unauthenticated, Unavailable,
    Unprocessable,
)
from .models import (
    ArchiveResult, Asset, Chunk, CommandInfo, CommandResult, CommandState, CreateTeamResponse, CreateWebhookResponse,
    Delivery, Event, FileContent, FileEntry, Image, KeyResponse, Metrics, NetworkView, Page, Preview, Sandbox,
    SandboxState, SandboxUsage, Schema, Secret, Snapshot, Team, TeamMe, Template, Ticket, UsageReport, Volume, VolumeMount,
    Webhook, Workload, WorkloadState,
)

__all__ = [
    "Retry", "AsyncClient", "AsyncCommand", "AsyncFiles", "AsyncSandbox", "Client", "Command", "Files", "SandboxHandle",
    "BudgetExceeded", "Conflict", "CoveError", "DigestMismatch", "InsufficientStorage", "Internal",
    "InvalidArgument", "NotFound", "PayloadTooLarge", "PermissionDenied", "PreconditionFailed",
    "ResourceExhausted", "Unauthenticated", "Unavailable", "Unprocessable",
    "Asset", "Snapshot", "Chunk", "CommandInfo", "CommandResult", "Event", "FileContent", "FileEntry", "Image", "Page", "Sandbox",
    "Workload",
    "ArchiveResult", "CommandState", "CreateTeamResponse", "CreateWebhookResponse", "Delivery", "KeyResponse",
    "Metrics", "NetworkView", "Preview", "SandboxState", "SandboxUsage", "Schema", "Secret", "Team", "TeamMe",
    "Template", "Ticket", "UsageReport", "Volume", "VolumeMount", "Webhook", "WorkloadState",
]
