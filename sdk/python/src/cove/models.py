"""The API's objects as typed dataclasses. Each keeps the whole JSON it came
from in ``raw``, so fields added by newer servers are never lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class Sandbox:
    id: str
    name: str
    state: str
    state_reason: str
    template: str
    workdir: str
    labels: Dict[str, str]
    team_id: str = ""
    cpus: float = 0
    memory_mib: int = 0
    disk_mib: int = 0
    cost_usd: float = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Sandbox":
        r = d.get("resources") or {}
        return cls(
            id=d.get("id", ""), name=d.get("name", ""), state=d.get("state", ""),
            state_reason=d.get("state_reason", ""), template=d.get("template", ""),
            workdir=d.get("workdir", ""), labels=d.get("labels") or {}, team_id=d.get("team_id", ""),
            cpus=r.get("cpus", 0), memory_mib=r.get("memory_mib", 0), disk_mib=r.get("disk_mib", 0),
            cost_usd=d.get("cost_usd", 0) or 0, raw=d,
        )


@dataclass
class CommandInfo:
    """A command as the server describes it."""

    id: str
    sandbox_id: str
    state: str
    exit_code: Optional[int]
    signal: str
    timed_out: bool
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "CommandInfo":
        return cls(
            id=d.get("id", ""), sandbox_id=d.get("sandbox_id", ""), state=d.get("state", ""),
            exit_code=d.get("exit_code"), signal=d.get("signal", "") or "",
            timed_out=bool(d.get("timed_out")), raw=d,
        )

    @property
    def done(self) -> bool:
        return self.state not in ("", "running", "starting")


@dataclass
class CommandResult:
    """What ``run`` returns: the ended command and its output."""

    command: CommandInfo
    stdout: str
    stderr: str
    truncated: bool

    @property
    def exit_code(self) -> Optional[int]:
        return self.command.exit_code

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "CommandResult":
        return cls(
            command=CommandInfo.from_dict(d.get("command") or {}), stdout=d.get("stdout", ""),
            stderr=d.get("stderr", ""), truncated=bool(d.get("truncated")),
        )


@dataclass
class Chunk:
    """One record of a command's output: a chunk of a stream, or the exit
    (``type == "exit"``), or the mark where recording stopped
    (``type == "truncated"``)."""

    seq: int
    stream: str = ""
    data: bytes = b""
    type: str = ""
    exit_code: Optional[int] = None
    signal: str = ""
    timed_out: bool = False


@dataclass
class FileEntry:
    name: str
    path: str
    type: str
    size: int
    mode: str
    mtime: str
    version: str
    uid: int = 0
    gid: int = 0
    target: str = ""

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "FileEntry":
        return cls(
            name=d.get("name", ""), path=d.get("path", ""), type=d.get("type", ""), size=d.get("size", 0),
            mode=d.get("mode", ""), mtime=d.get("mtime", ""), version=d.get("version", ""),
            uid=d.get("uid", 0), gid=d.get("gid", 0), target=d.get("target", "") or "",
        )


@dataclass
class FileContent:
    """A whole file read: its bytes, version and sha-256 (checked)."""

    data: bytes
    version: str
    sha256: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


@dataclass
class Event:
    id: str
    type: str
    sandbox_id: str
    command_id: str
    time: str
    data: Dict[str, Any]

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Event":
        return cls(
            id=d.get("id", ""), type=d.get("type", ""), sandbox_id=d.get("sandbox_id", "") or "",
            command_id=d.get("command_id", "") or "", time=d.get("time", ""), data=d.get("data") or {},
        )


@dataclass
class Asset:
    """A stored archive of a folder, kept once per team and sha-256 (hex)."""

    id: str
    name: str
    size: int
    sha256: str
    created_at: str
    team_id: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Asset":
        return cls(
            id=d.get("id", ""), name=d.get("name", "") or "", size=d.get("size", 0) or 0,
            sha256=d.get("sha256", "") or "", created_at=d.get("created_at", "") or "",
            team_id=d.get("team_id", "") or "", raw=d,
        )

    def source(self) -> Dict[str, str]:
        """The ``source`` of a sandbox that starts from this asset:
        ``client.create(source=asset.source())``."""
        return {"type": "asset", "asset_id": self.id}


@dataclass
class Page:
    """One page of a list, and the cursor of the next ("" at the end)."""

    items: List[Any]
    next_cursor: str


@dataclass
class Workload:
    """A batch run: queued until a node can place it, then run to
    completion in a container of its own."""

    id: str
    state: str
    state_reason: str
    template: str
    exit_code: Optional[int]
    signal: str
    timed_out: bool
    labels: Dict[str, str]
    team_id: str = ""
    gpus: int = 0
    devices: List[str] = field(default_factory=list)
    cost_usd: float = 0
    started_at: Optional[str] = None
    ended_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Workload":
        r = d.get("resources") or {}
        return cls(
            id=d.get("id", ""), state=d.get("state", ""), state_reason=d.get("state_reason", "") or "",
            template=d.get("template", ""), exit_code=d.get("exit_code"), signal=d.get("signal", "") or "",
            timed_out=bool(d.get("timed_out")), labels=d.get("labels") or {}, team_id=d.get("team_id", ""),
            gpus=r.get("gpus", 0) or 0, devices=d.get("devices") or [], cost_usd=d.get("cost_usd", 0) or 0,
            started_at=d.get("started_at"), ended_at=d.get("ended_at"), raw=d,
        )

    @property
    def done(self) -> bool:
        return self.state in ("exited", "failed", "cancelled")


@dataclass
class Image:
    """An image imported from an OCI artifact, usable as a template by its
    name (another team's, by ``template``: TEAM/NAME)."""

    id: str
    name: str
    digest: str
    size_bytes: int
    config: Dict[str, Any]
    defaults: Dict[str, Any]
    limits: Dict[str, Any]
    admission: Dict[str, Any]
    examples: List[str]
    team_id: str = ""
    template: str = ""
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Image":
        return cls(
            id=d.get("id", ""), name=d.get("name", ""), digest=d.get("digest", ""),
            size_bytes=d.get("size_bytes", 0) or 0, config=d.get("config") or {}, defaults=d.get("defaults") or {},
            limits=d.get("limits") or {}, admission=d.get("admission") or {}, examples=d.get("examples") or [],
            team_id=d.get("team_id", ""), template=d.get("template", ""), created_at=d.get("created_at", "") or "", raw=d,
        )
