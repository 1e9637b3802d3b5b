"""The API's objects as typed dataclasses, one per schema of
api/openapi.json (generated into _schema.py by scripts/gen_models.py; enums
are ``StrEnum``s, so ``sb.state == "running"`` holds). Each keeps the whole
JSON it came from in ``raw``, so fields added by newer servers are never
lost, and reads like that dict (``obj["field"]``, ``obj.get``, ``in``).

The classes below add what the SDK offers on top of a schema (shortcuts,
``done``); they are registered so that the same schema nested in another
object decodes to them too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Generic, List, Optional, TypeVar, Union

from . import _schema
from ._model import register
from ._schema import *  # noqa: F401,F403 every schema's class and enum, by its name

Schema = _schema


class Sandbox(_schema.Sandbox):
    """A sandbox (schema Sandbox); cpus, memory_mib and disk_mib are its
    resources'."""

    @property
    def cpus(self) -> float:
        return self.resources.cpus if self.resources else 0

    @property
    def memory_mib(self) -> int:
        return self.resources.memory_mib if self.resources else 0

    @property
    def disk_mib(self) -> int:
        return self.resources.disk_mib if self.resources else 0


class CommandInfo(_schema.Command):
    """A command as the server describes it (schema Command)."""

    @property
    def done(self) -> bool:
        return self.state not in (None, "", "running", "starting")


class CommandResult(_schema.CommandResult):
    """What ``run`` returns: the ended command and its output."""

    @property
    def exit_code(self) -> Optional[int]:
        return self.command.exit_code if self.command else None


@dataclass
class Chunk:
    """One record of a command's output (schema OutputRecord, its data
    decoded): a chunk of a stream, or the exit (``type == "exit"``), or the
    mark where recording stopped (``type == "truncated"``)."""

    seq: int
    stream: Union[_schema.OutputRecordStream, str] = ""  # "" on an exit or truncation record
    data: bytes = b""
    type: Union[_schema.OutputRecordType, str] = ""  # "" on a chunk of a stream
    exit_code: Optional[int] = None
    signal: str = ""
    timed_out: bool = False


class FileEntry(_schema.FileEntry):
    """A file, directory or symlink of a sandbox (schema FileEntry)."""


@dataclass
class FileContent:
    """A whole file read: its bytes, version and sha-256 (checked)."""

    data: bytes
    version: str
    sha256: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


class Event(_schema.Event):
    """An entry of the team's event log (schema Event)."""


class Asset(_schema.Asset):
    """A stored archive of a folder, kept once per team and sha-256 (hex)."""

    def source(self) -> Dict[str, str]:
        """The ``source`` of a sandbox that starts from this asset:
        ``client.create(source=asset.source())``."""
        return {"type": "asset", "asset_id": self.id}


class Snapshot(_schema.Snapshot):
    """A sandbox's files frozen at one moment, kept by the team."""

    def source(self) -> Dict[str, str]:
        """The ``source`` of a sandbox that starts on this snapshot:
        ``client.create(source=snap.source())``."""
        return {"type": "snapshot", "snapshot_id": self.id}


T = TypeVar("T")


@dataclass
class Page(Generic[T]):
    """One page of a list, and the cursor of the next ("" at the end)."""

    items: List[T]
    next_cursor: str


class Workload(_schema.Workload):
    """A batch run: queued until a node can place it, then run to
    completion in a container of its own. gpus is its resources'."""

    @property
    def gpus(self) -> int:
        return (self.resources.gpus or 0) if self.resources else 0

    @property
    def done(self) -> bool:
        return self.state in ("exited", "failed", "cancelled")


class Image(_schema.Image):
    """An image imported from an OCI artifact, usable as a template by its
    name (another team's, by ``template``: TEAM/NAME)."""


for _cls in (Sandbox, CommandInfo, CommandResult, FileEntry, Event, Asset, Snapshot, Workload, Image):
    register(_cls, _cls.__mro__[1].__name__)
