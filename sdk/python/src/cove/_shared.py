"""What the sync and async clients share: how each call is asked, and how
its answer is read. Neither does any I/O here."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import tarfile
import uuid
from dataclasses import dataclass, field
from typing import IO, Any, AsyncIterator, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from .errors import DigestMismatch, InvalidArgument, Unavailable
from ._model import enum_value
from ._schema import OutputRecordStream, OutputRecordType
from .models import Chunk, Event

DEFAULT_URL = "http://127.0.0.1:7070"


def config(url: Optional[str], api_key: Optional[str]) -> "tuple[str, str]":
    """The server URL and key: arguments, else COVE_URL and COVE_API_KEY,
    else the CLI's config file."""
    cfg: Dict[str, str] = {}
    home = os.environ.get("HOME")
    if home:
        try:
            with open(os.path.join(home, ".config", "cove", "config.json")) as f:
                cfg = json.load(f)
        except (OSError, ValueError):
            cfg = {}
    url = url or os.environ.get("COVE_URL") or cfg.get("url") or DEFAULT_URL
    key = api_key or os.environ.get("COVE_API_KEY") or cfg.get("api_key") or ""
    if not key:
        raise InvalidArgument("no API key: pass api_key, set COVE_API_KEY, or run `cove serve` once to write the CLI config")
    return url.rstrip("/"), key


@dataclass
class Req:
    """One call to the API, before any I/O. ``keyed`` is False for the calls
    that refuse an Idempotency-Key (teams, keys, tickets, private
    previews) or ignore one (stdin): they get no key, and, not being
    idempotent, no retry."""

    method: str
    path: str
    params: Dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    keyed: bool = True


#: The methods that are idempotent by themselves, retried without a key.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def add_key(r: Req) -> None:
    """Gives a changing call that accepts one an Idempotency-Key of its
    own, so that a retry of it is answered, not done twice."""
    if r.method in ("GET", "HEAD", "OPTIONS") or not r.keyed:
        return
    if not any(k.lower() == "idempotency-key" for k in r.headers):
        r.headers["Idempotency-Key"] = "py-" + uuid.uuid4().hex


class Rewind:
    """A request body streamed from a seekable file, from where the file
    stood when it was made; each try reads it again from there, so a call
    with such a body can be retried as a call with bytes can."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.start = f.tell()


def seekable(f: Any) -> bool:
    """Whether f is a file that can be read again from where it stands."""
    try:
        return bool(f.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def body(content: Any) -> Any:
    """What a try sends of a request's content: a Rewind's bytes from its
    start, in pieces; anything else as it is."""
    if isinstance(content, Rewind):
        content.f.seek(content.start)
        return chunks(content.f)
    return content


def abody(content: Any) -> Any:
    """body for the asyncio client (the file's reads run in a thread)."""
    if isinstance(content, Rewind):
        content.f.seek(content.start)
        return achunks(content.f)
    return content


def retryable(r: Req) -> bool:
    """Whether sending r again is safe: it is idempotent (by its method or
    its Idempotency-Key), and its body can be sent again (bytes, or a
    Rewind; a stream cannot)."""
    if r.content is not None and not isinstance(r.content, (bytes, str, Rewind)):
        return False
    if not r.keyed and r.method not in IDEMPOTENT:
        return False
    return r.method in IDEMPOTENT or any(k.lower() == "idempotency-key" for k in r.headers)


@dataclass(frozen=True)
class Retry:
    """How failed calls are retried: on 429, 503, a 409 that carries
    Retry-After (the same key's first attempt still running) and transport
    failures, for idempotent calls and calls with an Idempotency-Key.
    ``attempts`` bounds the tries (the first included), ``total_s`` the
    time from the first try after which none starts; between tries the
    wait is the answer's Retry-After, else an exponential backoff from
    ``base_s`` up to ``cap_s`` with full jitter. ``Retry(attempts=1)``
    never retries."""

    attempts: int = 5
    total_s: float = 30.0
    base_s: float = 0.25
    cap_s: float = 5.0


def retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After in seconds, from its delay-seconds or HTTP-date form."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        from email.utils import parsedate_to_datetime
        import datetime as _dt

        when = parsedate_to_datetime(value)
        return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())
    except (TypeError, ValueError):
        return None


class Attempts:
    """The retry decisions of one call, kept apart from its I/O so that the
    sync and async clients decide alike. ``delay`` answers how long to wait
    before the next try, or None when the failure is final."""

    def __init__(self, r: Req, policy: Retry, deadline_s: Optional[float], clock: Any = None, rand: Any = None) -> None:
        import random
        import time

        self._clock = clock or time.monotonic
        self._rand = rand or random.random
        self._policy = policy
        self._ok = retryable(r)
        self._start = self._clock()
        budget = policy.total_s if deadline_s is None else min(policy.total_s, deadline_s)
        self._end = self._start + budget
        self.tries = 1

    def delay(self, status: Optional[int], headers: Optional[Mapping[str, str]]) -> Optional[float]:
        """status is None for a transport failure."""
        if not self._ok or self.tries >= self._policy.attempts:
            return None
        after = retry_after((headers or {}).get("Retry-After")) if headers is not None else None
        if status is None or status in (429, 503):
            pass
        elif status == 409 and after is not None:
            pass
        else:
            return None
        if after is not None:
            # The server said when: wait that long, and a little more so
            # that many clients told the same do not come back together.
            wait = after + self._rand() * min(1.0, after / 10 + 0.05)
        else:
            wait = self._rand() * min(self._policy.cap_s, self._policy.base_s * 2 ** (self.tries - 1))
        if self._clock() + wait > self._end:
            return None
        self.tries += 1
        return wait


def timeout_of(default_s: Optional[float], call_s: Optional[float]) -> Any:
    """The httpx timeout of a call: the client's default bounds connecting,
    writing and waiting for a pooled connection, not reading (long polls and
    streams read for as long as they last); a call's own timeout bounds
    every phase."""
    import httpx

    if call_s is not None:
        return httpx.Timeout(call_s)
    return httpx.Timeout(default_s, read=None)


def esc(s: str) -> str:
    return quote(s, safe="")


def sandbox_path(ref: str) -> str:
    return "/v1/sandboxes/" + esc(ref)


def asset_path(asset_id: str) -> str:
    return "/v1/assets/" + esc(asset_id)


def snapshot_path(ref: str) -> str:
    return "/v1/snapshots/" + esc(ref)


def volume_path(ref: str) -> str:
    return "/v1/volumes/" + esc(ref)


def volume_mounts(volumes: Any) -> Any:
    """create's volumes as the API takes them: each a mapping, as it is, or
    a VolumeMount (its name, path and read_only); None stays None."""
    if volumes is None:
        return None
    out = []
    for v in volumes:
        if isinstance(v, Mapping):
            out.append(dict(v))
        else:
            m = {"name": v.name, "path": v.path}
            if v.read_only:
                m["read_only"] = True
            out.append(m)
    return out


def command_path(ref: str, cid: str) -> str:
    return sandbox_path(ref) + "/commands/" + esc(cid)


def drop_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def workload_path(wid: str) -> str:
    return "/v1/workloads/" + esc(wid)


def image_path(ref: str) -> str:
    return "/v1/images/" + esc(ref)


def workload_body(
    command: Optional[str], argv: Optional[Sequence[str]], template: Optional[str], image: Optional[str],
    source: Optional[Mapping[str, Any]], env: Optional[Mapping[str, str]], secrets: Optional[Mapping[str, str]],
    workdir: Optional[str], user: Optional[str], cpus: Optional[float], memory_mib: Optional[int],
    disk_mib: Optional[int], gpus: Optional[int], gpu_type: Optional[str], timeout_s: Optional[int],
    max_queue_s: Optional[int], labels: Optional[Mapping[str, str]], extra: Mapping[str, Any],
) -> Dict[str, Any]:
    if (command is None) == (argv is None):
        raise InvalidArgument("give exactly one of command (a shell string) and argv (a list)")
    res = drop_none({"cpus": cpus, "memory_mib": memory_mib, "disk_mib": disk_mib, "gpus": gpus or None,
                     "gpu_type": gpu_type})
    return drop_none({
        "command": command, "argv": list(argv) if argv is not None else None, "template": template, "image": image,
        "source": dict(source) if source else None, "env": dict(env) if env else None,
        "secrets": dict(secrets) if secrets else None, "workdir": workdir, "user": user, "resources": res or None,
        "timeout_s": timeout_s, "max_queue_s": max_queue_s, "labels": dict(labels) if labels else None, **extra,
    })


def workload_list_params(state: Optional[Union[str, Sequence[str]]], limit: int, cursor: str) -> Dict[str, Any]:
    params: Dict[str, Any] = {"limit": limit}
    if state:
        params["state"] = [state] if isinstance(state, str) else list(state)
    if cursor:
        params["cursor"] = cursor
    return params


def workload_get_params(wait: Optional[str], timeout_s: Optional[int]) -> Dict[str, Any]:
    if not wait:
        return {}
    return drop_none({"wait": wait, "timeout_s": timeout_s})


def image_import_req(name: str, settings: Optional[Mapping[str, Any]], body: Any) -> Req:
    if not name:
        raise InvalidArgument("an imported image needs a name")
    params: Dict[str, Any] = {"name": name}
    if settings:
        params["settings"] = json.dumps(dict(settings))
    return Req("POST", "/v1/images", params, content=body, headers={"Content-Type": "application/x-tar"})


def command_body(
    command: Optional[str], argv: Optional[Sequence[str]], cwd: Optional[str], env: Optional[Mapping[str, str]],
    secrets: Optional[Mapping[str, str]], timeout_s: Optional[int], stdin: bool, user: Optional[str],
    pty: Optional[Mapping[str, int]], no_output_alert_s: Optional[int], tag: Optional[str] = None,
) -> Dict[str, Any]:
    if (command is None) == (argv is None):
        raise InvalidArgument("give exactly one of command (a shell string) and argv (a list)")
    return drop_none({
        "command": command, "argv": list(argv) if argv is not None else None, "cwd": cwd,
        "env": dict(env) if env else None, "secrets": dict(secrets) if secrets else None,
        "timeout_s": timeout_s, "stdin": stdin or None, "user": user, "pty": dict(pty) if pty else None,
        "no_output_alert_s": no_output_alert_s, "tag": tag,
    })


def command_params(wait: bool, wake: bool) -> Dict[str, Any]:
    """The query of POST …/commands: wait for the end, and wake=false
    (the server's default is to wake an asleep sandbox)."""
    params: Dict[str, Any] = {}
    if wait:
        params["wait"] = "true"
    if not wake:
        params["wake"] = "false"
    return params


def parse_chunk(line: bytes) -> Chunk:
    d = json.loads(line)
    return Chunk(
        seq=d.get("seq", 0), stream=enum_value(OutputRecordStream, d.get("stream") or ""),
        data=base64.b64decode(d["data"]) if d.get("data") else b"", type=enum_value(OutputRecordType, d.get("type") or ""),
        exit_code=d.get("exit_code"), signal=d.get("signal", "") or "", timed_out=bool(d.get("timed_out")),
    )


def repr_digest(data: bytes) -> str:
    return "sha-256=:" + base64.b64encode(hashlib.sha256(data).digest()).decode() + ":"


def parse_digest(value: str) -> Optional[bytes]:
    for item in value.split(","):
        k, _, v = item.strip().partition("=")
        if k.strip().lower() == "sha-256":
            v = v.strip()
            if len(v) >= 2 and v[0] == ":" and v[-1] == ":":
                return base64.b64decode(v[1:-1])
    return None


def check_digest(path: str, data: bytes, header: str) -> bytes:
    want = parse_digest(header or "")
    if want is None:
        raise DigestMismatch(f"download of {path} has no sha-256 Repr-Digest; refusing unchecked bytes")
    got = hashlib.sha256(data).digest()
    if got != want:
        raise DigestMismatch(f"download of {path}: the bytes' sha-256 is not the one the server announced")
    return got


def format_digest(digest: bytes) -> str:
    return "sha-256=:" + base64.b64encode(digest).decode() + ":"


class DigestCheck:
    """Hashes a download as it goes; ``check()`` at its end compares with
    the Repr-Digest the server announced."""

    def __init__(self, what: str, header: str) -> None:
        self.what = what
        self.want = parse_digest(header or "")
        if self.want is None:
            raise DigestMismatch(f"download of {what} has no sha-256 Repr-Digest; refusing unchecked bytes")
        self.h = hashlib.sha256()

    def update(self, b: bytes) -> None:
        self.h.update(b)

    def check(self) -> bytes:
        got = self.h.digest()
        if got != self.want:
            raise DigestMismatch(f"download of {self.what}: the bytes' sha-256 is not the one the server announced")
        return got


AssetData = Union[bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]


@contextlib.contextmanager
def digested_body(data: AssetData) -> Iterator[Tuple[Union[bytes, IO[bytes]], str]]:
    """An archive upload's body and its Repr-Digest, so that the server
    checks the bytes it stores: bytes as they are; a seekable binary file
    hashed first, then sent from where it stood; any other stream (a pipe,
    an iterable of bytes) copied into a temporary file while hashed. Files
    are sent in pieces, never read whole into memory."""
    import tempfile

    if isinstance(data, str):
        raise InvalidArgument("an asset is an archive's bytes: pass bytes or a binary file, "
                              "or use create_asset_from_file / create_asset_from_dir for a path")
    if isinstance(data, (bytes, bytearray, memoryview)):
        b = bytes(data)
        yield b, repr_digest(b)
        return
    read = getattr(data, "read", None)
    seekable = getattr(data, "seekable", None)
    if callable(read) and callable(seekable) and seekable():
        f: IO[bytes] = data  # type: ignore[assignment]
        start = f.tell()
        h = hashlib.sha256()
        for b in chunks(f):
            h.update(b)
        f.seek(start)
        yield f, format_digest(h.digest())
        return
    pieces: Iterable[bytes] = chunks(data) if callable(read) else data  # type: ignore[arg-type]
    with tempfile.TemporaryFile() as tmp:
        h = hashlib.sha256()
        for b in pieces:
            h.update(b)
            tmp.write(b)
        tmp.seek(0)
        yield tmp, format_digest(h.digest())


def asset_req(name: Optional[str], body: Any, digest: str) -> Req:
    return Req("POST", "/v1/assets", {"name": name} if name else {}, content=body,
               headers={"Content-Type": "application/gzip", "Repr-Digest": digest})


def version_of(etag: str) -> str:
    return etag.strip().strip('"')


def write_headers(data: bytes, if_version: Optional[str]) -> Dict[str, str]:
    h = {"Content-Type": "application/octet-stream", "Repr-Digest": repr_digest(data)}
    if if_version == "none":
        h["If-None-Match"] = "*"
    elif if_version:
        h["If-Match"] = '"' + if_version + '"'
    return h


class SSE:
    """Reads server-sent events line by line."""

    def __init__(self) -> None:
        self.id = ""
        self.data: List[str] = []

    def feed(self, line: str) -> Optional[Event]:
        # httpx before 0.24 keeps the line ending; later ones drop it.
        line = line.rstrip("\r\n")
        if line == "":
            if not self.data:
                return None
            ev = Event.from_dict(json.loads("\n".join(self.data)))
            self.data = []
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            self.id = value
        elif name == "data":
            self.data.append(value)
        return None


def _git_line(line: str) -> str:
    """A pattern line with git's rule for trailing spaces applied: dropped
    unless the last is escaped with a backslash, which keeps one space.
    pathspec 0.11 refuses that escape at a line's end, so the kept space
    becomes a one-character class."""
    stripped = line.rstrip(" ")
    escapes = len(stripped) - len(stripped.rstrip("\\"))
    if stripped != line and escapes % 2 == 1:
        return stripped[:-1] + "[ ]"
    return stripped


class Ignore:
    """.coveignore files as git reads .gitignore files: one in any folder
    applies below it, a later pattern (or a deeper file) overrides an
    earlier one, with ``**``, negation, anchored and directory-only
    patterns. ``exclude`` patterns count as a .coveignore at the root that
    comes first. The matching is pathspec's gitwildmatch."""

    def __init__(self, root: str, exclude: Sequence[str] = ()) -> None:
        self.root = root
        self._specs: Dict[str, Any] = {}
        self._exclude = list(exclude)

    def _spec(self, rel_dir: str) -> Any:
        """The patterns of the folder rel_dir ("" for the root)."""
        import pathspec

        if rel_dir not in self._specs:
            lines: List[str] = list(self._exclude) if rel_dir == "" else []
            try:
                with open(os.path.join(self.root, rel_dir, ".coveignore")) as f:
                    lines += f.read().splitlines()
            except OSError:
                pass
            lines = [_git_line(x) for x in lines]
            self._specs[rel_dir] = pathspec.PathSpec.from_lines("gitwildmatch", lines) if lines else None
        return self._specs[rel_dir]

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether the path rel (slash-separated, from the root) is left
        out. Its parents are asked first by the caller, which does not walk
        into an ignored folder, as git does not."""
        if rel.rsplit("/", 1)[-1] == ".coveignore" and not is_dir:
            return False
        parts = rel.split("/")
        verdict = False
        for i in range(len(parts)):
            base = "/".join(parts[:i])
            spec = self._spec(base)
            if spec is None:
                continue
            sub = "/".join(parts[i:]) + ("/" if is_dir else "")
            for pattern in spec.patterns:
                if pattern.include is None:
                    continue
                if pattern.match_file(sub) is not None:
                    verdict = bool(pattern.include)
        return verdict


def pack_dir(local: str, exclude: Sequence[str] = ()) -> IO[bytes]:
    """A folder as tar.gz in a temporary file: modes, symlinks inside the
    folder and empty directories kept; a symlink that leaves the folder is
    refused; .coveignore files are read as git reads .gitignore files (see
    Ignore), exclude patterns first."""
    import tempfile

    root = os.path.abspath(local)
    if not os.path.isdir(root):
        raise InvalidArgument(f"{local} is not a directory")
    ignore = Ignore(root, exclude)
    out = tempfile.TemporaryFile()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            keep = []
            for d in dirnames:
                rel = d if rel_dir == "." else rel_dir + "/" + d
                if not ignore.ignored(rel, True):
                    keep.append(d)
            dirnames[:] = keep
            for name in sorted(dirnames + filenames):
                rel = name if rel_dir == "." else rel_dir + "/" + name
                if ignore.ignored(rel, name in dirnames):
                    continue
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    target = os.readlink(full)
                    resolved = os.path.normpath(os.path.join(os.path.dirname(full), target))
                    if os.path.isabs(target) or not (resolved == root or resolved.startswith(root + os.sep)):
                        raise InvalidArgument(f"{rel} is a symlink to {target}, outside the folder")
                ti = tar.gettarinfo(full, arcname=rel)
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                if ti.isreg():
                    with open(full, "rb") as f:
                        tar.addfile(ti, f)
                elif ti.isdir() or ti.issym():
                    tar.addfile(ti)
                # other kinds (sockets, devices, fifos) are left out
    out.seek(0)
    return out


def unpack(archive: IO[bytes], local: str) -> None:
    """Extract a tar.gz into local, refusing entries that leave it."""
    root = os.path.abspath(local)
    os.makedirs(root, exist_ok=True)
    dirs = []
    with tarfile.open(fileobj=archive, mode="r:gz") as tar:
        for ti in tar:
            name = os.path.normpath(ti.name)
            dest = os.path.abspath(os.path.join(root, name))
            if name.startswith("..") or os.path.isabs(ti.name) or not (dest == root or dest.startswith(root + os.sep)):
                raise InvalidArgument(f"archive entry {ti.name!r} leaves {local}")
            if ti.issym():
                t = os.path.normpath(os.path.join(os.path.dirname(dest), ti.linkname))
                if os.path.isabs(ti.linkname) or not t.startswith(root):
                    raise InvalidArgument(f"archive symlink {ti.name!r} points outside {local}")
            if ti.islnk() or not (ti.isreg() or ti.isdir() or ti.issym()):
                continue
            if dest == root:
                continue
            if ti.isdir():
                os.makedirs(dest, exist_ok=True)
                dirs.append((dest, ti.mode & 0o7777))
            elif ti.isreg():
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                src = tar.extractfile(ti)
                assert src is not None
                with open(dest, "wb") as f:
                    while True:
                        b = src.read(1 << 20)
                        if not b:
                            break
                        f.write(b)
                os.chmod(dest, ti.mode & 0o7777)
            elif ti.issym():
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                if os.path.lexists(dest):
                    os.remove(dest)
                os.symlink(ti.linkname, dest)
    # Directories get their modes last, so that a read-only one still
    # received its files.
    for d, mode in reversed(dirs):
        os.chmod(d, mode)


def read_io(data: "bytes | str | IO[bytes]") -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    return data.read()



def chunks(f: IO[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """A file's bytes in pieces, to stream a request body."""
    while True:
        b = f.read(size)
        if not b:
            return
        yield b


async def achunks(f: IO[bytes], size: int = 1 << 20) -> AsyncIterator[bytes]:
    """A file's bytes in pieces, to stream an asyncio request body (the
    reads run in a thread, so the loop is not held by the disk)."""
    import asyncio

    while True:
        b = await asyncio.to_thread(f.read, size)
        if not b:
            return
        yield b


def call(fn: Any, *args: Any) -> Any:
    """fn(*args): the sync client's form of the async one's
    ``await asyncio.to_thread(fn, *args)``."""
    return fn(*args)


def transport_error(url: str, e: BaseException, request_id: str = "") -> "Unavailable":
    """A failure to reach the server (refused, reset, timed out) as the
    SDK's own error: code unavailable, no status."""
    err = Unavailable(f"{type(e).__name__} talking to {url}: {e}", {"transport": type(e).__name__}, None)
    err.request_id = request_id
    return err


def add_request_id(r: Req) -> str:
    """Names the call with an X-Request-Id of its own (kept across its
    retries), which its errors carry, to find it in the server's logs."""
    for k, v in r.headers.items():
        if k.lower() == "x-request-id":
            return v
    r.headers["X-Request-Id"] = "req_" + uuid.uuid4().hex[:24]
    return r.headers["X-Request-Id"]
