"""The asyncio client. The sync client, cove.client, is generated from
this file by scripts/gen_sync.py: edit here, then run the script."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from typing import IO, Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Union

import httpx

from . import _shared as sh
from ._attach import AsyncAttachment
from ._shared import Retry
from .errors import Conflict, NotFound, Unavailable, error_from
from .models import (
    ArchiveResult, Asset, Chunk, CommandInfo, CommandResult, CreateTeamResponse, CreateWebhookResponse, Delivery, Event,
    FileContent, FileEntry, FileEvent, Image, KeyResponse, Metrics, NetworkView, Page, Preview, Sandbox, SandboxUsage, Secret,
    Snapshot, Team,
    TeamMe, Volume, VolumeMount, Template, Ticket, UsageReport, Webhook, Workload,
)

Data = Union[bytes, str, IO[bytes]]

#: How often a broken stream is resumed before giving up, in a row.
STREAM_RETRIES = 8


class AsyncClient:
    """A cove client. ``url`` and ``api_key`` default to ``COVE_URL`` and
    ``COVE_API_KEY``, else the CLI's config file.

    ``timeout`` (seconds) bounds connecting, sending and waiting for a
    connection; reading is unbounded by default, for long polls and
    streams. ``with_options(timeout=...)`` gives a call a bound of its own,
    on every phase and on its retries. ``retry`` says how failed calls are
    retried (see Retry); changing calls get an Idempotency-Key of their own
    where the API takes one, so that a retry never does a thing twice."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, *, timeout: float = 60.0,
                 retry: Retry = Retry(), transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        self.url, self._key = sh.config(url, api_key)
        kw: Dict[str, Any] = {}
        if transport is not None:
            kw["transport"] = transport
        self._http = httpx.AsyncClient(base_url=self.url, headers={"Authorization": "Bearer " + self._key},
                                       timeout=sh.timeout_of(timeout, None), **kw)
        self._timeout = timeout
        self._call_timeout: Optional[float] = None
        self._retry = retry

    def with_options(self, *, timeout: Optional[float] = None, retry: Optional[Retry] = None) -> "AsyncClient":
        """A view of this client whose calls have their own timeout (seconds,
        on every phase of each try and on all the tries together) or retry
        policy: ``client.with_options(timeout=5).get("name")``. It shares
        this client's connections; close this client, not the view."""
        view = copy.copy(self)
        if timeout is not None:
            view._call_timeout = timeout
        if retry is not None:
            view._retry = retry
        return view

    async def close(self) -> None:
        """Close the client's connections."""
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- plumbing --

    async def _send(self, r: sh.Req, stream: bool = False) -> httpx.Response:
        """Send r, retried as the retry policy allows. An error answer
        raises its CoveError; a transport failure raises Unavailable."""
        sh.add_key(r)
        rid = sh.add_request_id(r)
        tries = sh.Attempts(r, self._retry, self._call_timeout)
        timeout = sh.timeout_of(self._timeout, self._call_timeout)
        while True:
            req = self._http.build_request(r.method, r.path, params=r.params or None, json=r.json,
                                           content=sh.abody(r.content), headers=r.headers, timeout=timeout)
            try:
                resp = await self._http.send(req, stream=stream)
            except httpx.TransportError as e:
                wait = tries.delay(None, None)
                if wait is None:
                    raise sh.transport_error(self.url, e, rid) from e
                await asyncio.sleep(wait)
                continue
            if resp.status_code < 300:
                return resp
            try:
                body = await resp.aread()
            except httpx.TransportError as e:
                raise sh.transport_error(self.url, e, rid) from e
            finally:
                await resp.aclose()
            wait = tries.delay(resp.status_code, resp.headers)
            if wait is None:
                raise error_from(resp.status_code, body, resp.headers.get("X-Request-Id") or rid)
            await asyncio.sleep(wait)

    async def _json(self, r: sh.Req) -> Any:
        resp = await self._send(r)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    async def _lines(self, resp: httpx.Response) -> AsyncIterator[str]:
        """A streamed answer's lines; a cut is Unavailable."""
        try:
            async for line in resp.aiter_lines():
                yield line
        except httpx.TransportError as e:
            raise sh.transport_error(self.url, e) from e

    async def _bytes(self, resp: httpx.Response) -> AsyncIterator[bytes]:
        """A streamed answer's bytes; a cut is Unavailable."""
        try:
            async for b in resp.aiter_bytes():
                yield b
        except httpx.TransportError as e:
            raise sh.transport_error(self.url, e) from e

    async def _output(self, path: str, what: str, after: int, follow: bool,
                      started: Optional[Any] = None) -> AsyncIterator[Chunk]:
        """The NDJSON output records at path (a command's or a workload's)
        after seq ``after``, resumed after a dropped connection. started,
        when given, is called when the server answers Conflict (no output
        yet) while following: it waits until there is some, or re-raises."""
        seq, failures = after, 0
        last: Optional[Unavailable] = None
        while True:
            params: Dict[str, Any] = {"after": seq}
            if follow:
                params["follow"] = "true"
            try:
                resp = await self._send(sh.Req("GET", path, params), stream=True)
                try:
                    async for line in self._lines(resp):
                        line = line.strip()
                        if not line:
                            continue
                        ch = sh.parse_chunk(line.encode())
                        if ch.type != "exit" and ch.seq <= seq:
                            continue
                        seq, failures = ch.seq, 0
                        yield ch
                        if ch.type == "exit":
                            return
                finally:
                    await resp.aclose()
                if not follow:
                    return
            except Conflict:
                if not follow or started is None:
                    raise
                await started()
                continue
            except Unavailable as e:
                # A cut, or a server that is going away: resume after seq.
                last = e
            failures += 1
            if failures > STREAM_RETRIES:
                raise Unavailable(f"the output stream of {what} broke {failures} times in a row, "
                                  f"last after seq {seq}: {last}", None, None)
            await asyncio.sleep(min(0.05 * 2 ** failures, 5))

    async def create(self, *, name: Optional[str] = None, template: Optional[str] = None,
                     cpus: Optional[float] = None, memory_mib: Optional[int] = None,
                     disk_mib: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                     secrets: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
                     network: Optional[Mapping[str, Any]] = None, source: Optional[Mapping[str, Any]] = None,
                     setup: Optional[Mapping[str, Any]] = None, idle_timeout_s: Optional[int] = None,
                     on_idle: Optional[str] = None, max_lifetime_s: Optional[int] = None,
                     spend_limit_usd: Optional[float] = None, labels: Optional[Mapping[str, str]] = None,
                     on_budget: Optional[str] = None, budget_alerts: Optional[Sequence[float]] = None,
                     volumes: Optional[Sequence[Union[Mapping[str, Any], VolumeMount]]] = None,
                     wait: bool = True, keep: bool = False, idempotency_key: Optional[str] = None,
                     **extra: Any) -> "AsyncSandbox":
        """Create a sandbox (and wait until it runs, unless ``wait=False``).
        Used as a context manager, it is terminated on exit unless ``keep``.
        ``volumes`` mounts volumes of the team (create_volume), each
        ``{"name": ..., "path": ..., "read_only": ...}`` or a VolumeMount.

        Example::

            async with AsyncClient() as client:  # COVE_URL, COVE_API_KEY
                async with await client.create(name="build", cpus=2, memory_mib=2048) as sb:
                    result = await sb.run("make test")
                    print(result.exit_code, result.stdout)
        """
        res = sh.drop_none({"cpus": cpus, "memory_mib": memory_mib, "disk_mib": disk_mib})
        body = sh.drop_none({
            "name": name, "template": template, "resources": res or None, "env": env, "secrets": secrets,
            "workdir": workdir, "network": network, "source": source, "setup": setup,
            "idle_timeout_s": idle_timeout_s, "on_idle": on_idle, "max_lifetime_s": max_lifetime_s,
            "spend_limit_usd": spend_limit_usd, "labels": labels, "on_budget": on_budget,
            "budget_alerts": list(budget_alerts) if budget_alerts is not None else None,
            "volumes": sh.volume_mounts(volumes), **extra,
        })
        r = sh.Req("POST", "/v1/sandboxes", {"wait": "running"} if wait else {}, json=body)
        if idempotency_key:
            r.headers["Idempotency-Key"] = idempotency_key
        return AsyncSandbox(self, Sandbox.from_dict(await self._json(r)), keep=keep)

    async def get(self, ref: str) -> "AsyncSandbox":
        """A sandbox by ID or name.

        Example::

            sb = await client.get("build")  # by name, after a reconnect
            if sb.info.state == "asleep":
                await sb.wake()
        """
        return AsyncSandbox(self, Sandbox.from_dict(await self._json(sh.Req("GET", sh.sandbox_path(ref)))))

    async def list(self, *, state: Optional[Union[str, Sequence[str]]] = None,
                   labels: Optional[Mapping[str, str]] = None, limit: int = 100) -> AsyncIterator[Sandbox]:
        """Every sandbox of the team (newest first), page after page."""
        cursor = ""
        while True:
            page = await self.list_page(state=state, labels=labels, limit=limit, cursor=cursor)
            for sb in page.items:
                yield sb
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def list_page(self, *, state: Optional[Union[str, Sequence[str]]] = None,
                        labels: Optional[Mapping[str, str]] = None, limit: int = 100, cursor: str = "") -> Page[Sandbox]:
        """One page of the team's sandboxes (newest first); ``next_cursor`` asks for the next."""
        params: Dict[str, Any] = {"limit": limit}
        if state:
            params["state"] = [state] if isinstance(state, str) else list(state)
        if labels:
            params["label"] = [f"{k}={v}" for k, v in labels.items()]
        if cursor:
            params["cursor"] = cursor
        d = await self._json(sh.Req("GET", "/v1/sandboxes", params))
        return Page([Sandbox.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")

    async def events(self, *, sandbox: Optional[str] = None, types: Sequence[str] = (), after: str = "",
                     limit: int = 100) -> Page[Event]:
        """One page of the team's events, oldest first, after the event ID ``after``."""
        params: Dict[str, Any] = {"limit": limit}
        if sandbox:
            params["sandbox"] = sandbox
        if types:
            params["type"] = list(types)
        if after:
            params["after"] = after
        d = await self._json(sh.Req("GET", "/v1/events", params))
        return Page([Event.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")

    async def stream_events(self, *, sandbox: Optional[str] = None, types: Sequence[str] = (),
                            after: str = "") -> AsyncIterator[Event]:
        """Follow the team's events as they happen (server-sent events),
        resuming after the last one seen when the connection drops."""
        last, failures = after, 0
        while True:
            params: Dict[str, Any] = {}
            if sandbox:
                params["sandbox"] = sandbox
            if types:
                params["type"] = list(types)
            headers = {"Accept": "text/event-stream"}
            if last:
                headers["Last-Event-ID"] = last
            try:
                resp = await self._send(sh.Req("GET", "/v1/events/stream", params, headers=headers), stream=True)
                try:
                    sse = sh.SSE()
                    async for line in self._lines(resp):
                        ev = sse.feed(line)
                        if ev is not None:
                            last, failures = ev.id, 0
                            yield ev
                finally:
                    await resp.aclose()
            except Unavailable:
                failures += 1
                if failures > STREAM_RETRIES:
                    raise
                await asyncio.sleep(min(0.1 * 2 ** failures, 5))

    # -- assets --

    async def create_asset(self, data: sh.AssetData, *, name: Optional[str] = None) -> Asset:
        """Store an archive (tar or tar.gz: bytes, a binary file or an
        iterable of bytes) as an asset of the team. Files are streamed, with
        their sha-256 sent as Repr-Digest for the server to check. The same
        bytes are kept once: a second upload answers the existing asset."""
        cm = sh.digested_body(data)
        body, digest = await asyncio.to_thread(cm.__enter__)
        with contextlib.ExitStack() as stack:
            stack.push(cm)  # entered above, in the thread; left here
            content = body if isinstance(body, bytes) else sh.Rewind(body)
            return Asset.from_dict(await self._json(sh.asset_req(name, content, digest)))

    async def create_asset_from_file(self, path: str, *, name: Optional[str] = None) -> Asset:
        """Store a local tar or tar.gz file as an asset, streamed."""
        with open(path, "rb") as f:
            return await self.create_asset(f, name=name)

    async def create_asset_from_dir(self, local: str, *, name: Optional[str] = None,
                                    exclude: Sequence[str] = ()) -> Asset:
        """Store a local folder as an asset (tar.gz: modes, symlinks inside
        it and empty directories kept; ``exclude`` patterns and a
        .coveignore file honoured), packed into a temporary file and
        streamed."""
        with await asyncio.to_thread(sh.pack_dir, local, exclude) as f:
            return await self.create_asset(f, name=name)

    async def get_asset(self, asset_id: str) -> Asset:
        """An asset's metadata by ID."""
        return Asset.from_dict(await self._json(sh.Req("GET", sh.asset_path(asset_id))))

    async def list_assets(self, limit: int = 100) -> AsyncIterator[Asset]:
        """Every asset of the team, page after page."""
        cursor = ""
        while True:
            page = await self.list_assets_page(limit=limit, cursor=cursor)
            for a in page.items:
                yield a
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def list_assets_page(self, limit: int = 100, cursor: str = "") -> Page[Asset]:
        """One page of the team's assets; ``next_cursor`` asks for the next."""
        params: Dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        d = await self._json(sh.Req("GET", "/v1/assets", params))
        return Page([Asset.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")

    async def read_asset(self, asset_id: str) -> bytes:
        """An asset's bytes, checked against the server's sha-256
        (DigestMismatch otherwise)."""
        resp = await self._send(sh.Req("GET", sh.asset_path(asset_id) + "/content"))
        sh.check_digest(asset_id, resp.content, resp.headers.get("Repr-Digest", ""))
        return resp.content

    async def download_asset(self, asset_id: str, local: str) -> None:
        """Stream an asset's bytes into the file local, checked against the
        server's sha-256; on a mismatch the file is removed and
        DigestMismatch raised."""
        import os

        resp = await self._send(sh.Req("GET", sh.asset_path(asset_id) + "/content"), stream=True)
        try:
            check = sh.DigestCheck(asset_id, resp.headers.get("Repr-Digest", ""))
            with open(local, "wb") as f:
                async for b in self._bytes(resp):
                    check.update(b)
                    f.write(b)
            check.check()
        except BaseException:
            try:
                os.remove(local)
            except OSError:
                pass
            raise
        finally:
            await resp.aclose()

    async def delete_asset(self, asset_id: str) -> None:
        """Delete an asset; sandboxes made from it keep their files."""
        await self._json(sh.Req("DELETE", sh.asset_path(asset_id)))

    async def get_snapshot(self, ref: str) -> Snapshot:
        """A snapshot by ID or name."""
        return Snapshot.from_dict(await self._json(sh.Req("GET", sh.snapshot_path(ref))))

    async def list_snapshots(self, *, sandbox: str = "", limit: int = 100) -> AsyncIterator[Snapshot]:
        """Every snapshot of the team (of one sandbox when given), page after page."""
        cursor = ""
        while True:
            params: Dict[str, Any] = {"limit": limit}
            if sandbox:
                params["sandbox"] = sandbox
            if cursor:
                params["cursor"] = cursor
            d = await self._json(sh.Req("GET", "/v1/snapshots", params))
            for x in d.get("items") or []:
                yield Snapshot.from_dict(x)
            cursor = d.get("next_cursor", "") or ""
            if not cursor:
                return

    async def delete_snapshot(self, ref: str) -> None:
        """Delete a snapshot; one that sandboxes still stand on raises Conflict naming them."""
        await self._json(sh.Req("DELETE", sh.snapshot_path(ref)))

    async def create_volume(self, name: str, size_mib: int) -> Volume:
        """Create a volume of the team: a disk of ``size_mib`` (its quota) that
        outlives sandboxes, mounted by several at once (create's ``volumes``).

        Example::

            vol = await client.create_volume("cache", 1024)
            sb = await client.create(volumes=[{"name": "cache", "path": "/cache"}])
        """
        return Volume.from_dict(await self._json(sh.Req("POST", "/v1/volumes", json={"name": name, "size_mib": size_mib})))

    async def get_volume(self, ref: str) -> Volume:
        """A volume by ID or name."""
        return Volume.from_dict(await self._json(sh.Req("GET", sh.volume_path(ref))))

    async def list_volumes(self, *, limit: int = 100) -> AsyncIterator[Volume]:
        """Every volume of the team, page after page."""
        cursor = ""
        while True:
            page = await self.list_volumes_page(limit=limit, cursor=cursor)
            for v in page.items:
                yield v
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def list_volumes_page(self, *, limit: int = 100, cursor: str = "") -> Page[Volume]:
        """One page of the team's volumes; ``next_cursor`` asks for the next."""
        params: Dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        d = await self._json(sh.Req("GET", "/v1/volumes", params))
        return Page([Volume.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")

    async def delete_volume(self, ref: str) -> None:
        """Delete a volume and its files; one that sandboxes mount raises
        Conflict naming them (``err.details``)."""
        await self._json(sh.Req("DELETE", sh.volume_path(ref)))

    async def submit_workload(self, command: Optional[str] = None, *, argv: Optional[Sequence[str]] = None,
                              template: Optional[str] = None, image: Optional[str] = None,
                              source: Optional[Mapping[str, Any]] = None, env: Optional[Mapping[str, str]] = None,
                              secrets: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
                              user: Optional[str] = None, cpus: Optional[float] = None,
                              memory_mib: Optional[int] = None, disk_mib: Optional[int] = None,
                              gpus: Optional[int] = None, gpu_type: Optional[str] = None,
                              timeout_s: Optional[int] = None, max_queue_s: Optional[int] = None,
                              labels: Optional[Mapping[str, str]] = None, idempotency_key: Optional[str] = None,
                              **extra: Any) -> Workload:
        """Submit a batch run (a shell string, or argv); it is queued until
        a node can place it. ``image`` names an imported image to run in
        instead of a template."""
        body = sh.workload_body(command, argv, template, image, source, env, secrets, workdir, user, cpus,
                                memory_mib, disk_mib, gpus, gpu_type, timeout_s, max_queue_s, labels, extra)
        r = sh.Req("POST", "/v1/workloads", json=body)
        if idempotency_key:
            r.headers["Idempotency-Key"] = idempotency_key
        return Workload.from_dict(await self._json(r))

    async def get_workload(self, workload_id: str, *, wait: Optional[str] = None,
                           timeout_s: Optional[int] = None) -> Workload:
        """A workload; with ``wait`` (a state, e.g. "running" or "exited")
        the server answers once it is in that state or has ended, or after
        timeout_s."""
        return Workload.from_dict(await self._json(sh.Req("GET", sh.workload_path(workload_id),
                                                          sh.workload_get_params(wait, timeout_s))))

    async def wait_workload(self, workload_id: str, state: str = "exited", timeout_s: int = 300) -> Workload:
        """Wait until the workload is in state or has ended (long polls,
        repeated until then)."""
        while True:
            w = await self.get_workload(workload_id, wait=state, timeout_s=timeout_s)
            if w.state == state or w.done:
                return w

    async def list_workloads(self, *, state: Optional[Union[str, Sequence[str]]] = None,
                             limit: int = 100) -> AsyncIterator[Workload]:
        """Every workload of the team (oldest first), page after page."""
        cursor = ""
        while True:
            page = await self.list_workloads_page(state=state, limit=limit, cursor=cursor)
            for w in page.items:
                yield w
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def list_workloads_page(self, *, state: Optional[Union[str, Sequence[str]]] = None, limit: int = 100,
                                  cursor: str = "") -> Page[Workload]:
        """One page of the team's workloads (oldest first); ``next_cursor`` asks for the next."""
        d = await self._json(sh.Req("GET", "/v1/workloads", sh.workload_list_params(state, limit, cursor)))
        return Page([Workload.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")

    async def cancel_workload(self, workload_id: str) -> Workload:
        """Cancel a queued or running workload; answered once its container
        is gone (a workload that ended is answered as it is)."""
        return Workload.from_dict(await self._json(sh.Req("POST", sh.workload_path(workload_id) + "/cancel")))

    def workload_output(self, workload_id: str, after: int = 0, follow: bool = True) -> AsyncIterator[Chunk]:
        """A workload's output records after seq ``after``, read as a
        command's: in order, the exit last, resumed after a dropped
        connection. Following a workload that has not started yet waits
        until it does (a workload that ends without running raises
        Conflict)."""
        async def started() -> None:
            w = await self.get_workload(workload_id, wait="running", timeout_s=60)
            if w.done and not w.started_at:
                raise Conflict(f"workload {workload_id} is {w.state} and never ran: it has no output", status=409)

        return self._output(sh.workload_path(workload_id) + "/output", workload_id, after, follow, started)

    async def workload_stdout(self, workload_id: str) -> bytes:
        """A workload's recorded stdout, raw."""
        return (await self._send(sh.Req("GET", sh.workload_path(workload_id) + "/stdout"))).content

    async def workload_stderr(self, workload_id: str) -> bytes:
        """A workload's recorded stderr, raw."""
        return (await self._send(sh.Req("GET", sh.workload_path(workload_id) + "/stderr"))).content

    async def import_image(self, data: Union[str, IO[bytes], bytes], *, name: str,
                           settings: Optional[Mapping[str, Any]] = None) -> Image:
        """Import an image from an OCI image layout archive or a `docker
        save` archive (a local path, a binary file or bytes), streamed, as
        the team's image called name. settings: defaults, limits,
        admission, examples."""
        if isinstance(data, str):
            f = await asyncio.to_thread(open, data, "rb")
            try:
                return await self.import_image(f, name=name, settings=settings)
            finally:
                f.close()
        if isinstance(data, (bytes, bytearray, memoryview)):
            body: Any = bytes(data)
        else:
            # A file is sent again from where it stood if a try is retried;
            # a stream that cannot seek is sent once.
            body = sh.Rewind(data) if sh.seekable(data) else sh.achunks(data)
        return Image.from_dict(await self._json(sh.image_import_req(name, settings, body)))

    async def images(self) -> List[Image]:
        """The images the team may see."""
        return [Image.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/images"))).get("items") or []]

    async def get_image(self, ref: str) -> Image:
        """An image by ID or name."""
        return Image.from_dict(await self._json(sh.Req("GET", sh.image_path(ref))))

    async def update_image(self, ref: str, **settings: Any) -> Image:
        """Change an image's settings (defaults, limits, admission,
        examples); those left out keep theirs."""
        return Image.from_dict(await self._json(sh.Req("PATCH", sh.image_path(ref), json=sh.drop_none(settings))))

    async def delete_image(self, ref: str) -> None:
        """Delete an image no sandbox uses (Conflict while one does)."""
        await self._json(sh.Req("DELETE", sh.image_path(ref)))

    async def put_secret(self, name: str, value: str) -> Secret:
        """Store a secret of the team (its value is never returned)."""
        return Secret.from_dict(await self._json(sh.Req("PUT", "/v1/secrets/" + sh.esc(name), json={"value": value}, keyed=False)))

    async def get_secret(self, name: str) -> Secret:
        """A secret's name and times."""
        return Secret.from_dict(await self._json(sh.Req("GET", "/v1/secrets/" + sh.esc(name))))

    async def list_secrets(self) -> List[Secret]:
        """Every secret of the team: names and times, never values."""
        out: List[Secret] = []
        cursor = ""
        while True:
            d = await self._json(sh.Req("GET", "/v1/secrets", {"cursor": cursor} if cursor else {}))
            out += [Secret.from_dict(x) for x in d.get("items") or []]
            cursor = d.get("next_cursor", "") or ""
            if not cursor:
                return out

    async def delete_secret(self, name: str) -> None:
        """Delete a secret; sandboxes that already have it keep their copy."""
        await self._json(sh.Req("DELETE", "/v1/secrets/" + sh.esc(name)))

    async def create_webhook(self, url: str, events: Optional[List[str]] = None) -> CreateWebhookResponse:
        """Registers a URL for the team's events; the answer's ``secret``
        (whsec_...) is shown only this once."""
        body: Dict[str, Any] = {"url": url}
        if events:
            body["events"] = events
        return CreateWebhookResponse.from_dict(await self._json(sh.Req("POST", "/v1/webhooks", json=body)))

    async def list_webhooks(self) -> List[Webhook]:
        """Every webhook of the team."""
        out: List[Webhook] = []
        cursor = ""
        while True:
            d = await self._json(sh.Req("GET", "/v1/webhooks", {"cursor": cursor} if cursor else {}))
            out += [Webhook.from_dict(x) for x in d.get("items") or []]
            cursor = d.get("next_cursor", "") or ""
            if not cursor:
                return out

    async def get_webhook(self, webhook_id: str) -> Webhook:
        """A webhook by ID (its signing secret is not shown)."""
        return Webhook.from_dict(await self._json(sh.Req("GET", "/v1/webhooks/" + sh.esc(webhook_id))))

    async def delete_webhook(self, webhook_id: str) -> None:
        """Delete a webhook; no delivery starts after."""
        await self._json(sh.Req("DELETE", "/v1/webhooks/" + sh.esc(webhook_id)))

    async def webhook_deliveries(self, webhook_id: str, limit: int = 100) -> List[Delivery]:
        """The webhook's latest deliveries, newest first, with their attempts."""
        return [Delivery.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/webhooks/" + sh.esc(webhook_id) + "/deliveries", {"limit": str(limit)}))).get("items") or []]

    async def create_team(self, name: str) -> CreateTeamResponse:
        """Create a team (admin key) and its first API key, shown only this once. It takes no
        Idempotency-Key, so it is never retried."""
        return CreateTeamResponse.from_dict(await self._json(sh.Req("POST", "/v1/teams", json={"name": name}, keyed=False)))

    async def list_teams(self) -> List[Team]:
        """Every team (admin key)."""
        return [Team.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/teams"))).get("items") or []]

    async def create_key(self, team_id: str) -> KeyResponse:
        """A new API key of a team, shown only this once. It takes no Idempotency-Key, so it is
        never retried."""
        return KeyResponse.from_dict(await self._json(sh.Req("POST", "/v1/teams/" + sh.esc(team_id) + "/keys", keyed=False)))

    async def revoke_key(self, key_id: str) -> None:
        """Revoke an API key: calls made with it fail from now on."""
        await self._json(sh.Req("DELETE", "/v1/keys/" + sh.esc(key_id)))

    async def usage(self, *, from_: Optional[str] = None, to: Optional[str] = None,
                    group_by: Optional[str] = None) -> UsageReport:
        """The team's usage and cost (from and to: RFC 3339; group_by: "day"
        or "sandbox"), its spend this month and its monthly limit."""
        return UsageReport.from_dict(await self._json(sh.Req("GET", "/v1/usage", sh.drop_none({"from": from_, "to": to, "group_by": group_by}))))

    async def update_team(self, team_id: str, **fields: Any) -> Team:
        """PATCH a team (admin key): admission, spend_limit_usd (a month's;
        negative removes it), budget_alerts."""
        return Team.from_dict(await self._json(sh.Req("PATCH", "/v1/teams/" + sh.esc(team_id), json=sh.drop_none(fields))))

    async def create_ticket(self, path: str) -> Ticket:
        """A short-lived ticket for one path (a command's attach), for a browser, which cannot send
        a key on a WebSocket. Never retried."""
        return Ticket.from_dict(await self._json(sh.Req("POST", "/v1/tickets", json={"path": path}, keyed=False)))

    async def team_me(self) -> TeamMe:
        """The key's own team: its admission flags and limits."""
        return TeamMe.from_dict(await self._json(sh.Req("GET", "/v1/teams/me")))

    async def set_admission(self, team_id: str, admission: Mapping[str, bool]) -> Team:
        """Replace a team's admission flags (admin key)."""
        return Team.from_dict(await self._json(sh.Req("PATCH", "/v1/teams/" + sh.esc(team_id), json={"admission": dict(admission)})))

    async def templates(self) -> List[Template]:
        """The templates the team may use: status, progress, qualified."""
        return [Template.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/templates"))).get("items") or []]

    async def openapi(self) -> Dict[str, Any]:
        """The server's OpenAPI document."""
        return await self._json(sh.Req("GET", "/v1/openapi.json"))


class AsyncSandbox:
    """A sandbox and what can be done in it. ``info`` is its last known
    state; ``refresh()`` reads it again. Used as a context manager (``with``
    or ``async with``), it is terminated on exit unless ``keep``."""

    def __init__(self, client: AsyncClient, info: Sandbox, keep: bool = False) -> None:
        self._c = client
        self.info = info
        self.id = info.id
        self.keep = keep
        self.files = AsyncFiles(client, info.id)

    def __repr__(self) -> str:
        return f"<AsyncSandbox {self.id} {self.info.state}>"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self.keep:
            try:
                await self.terminate()
            except NotFound:
                pass

    def _set(self, d: Any) -> Sandbox:
        self.info = Sandbox.from_dict(d)
        return self.info

    async def refresh(self) -> Sandbox:
        """Read the sandbox again; ``info`` holds the answer."""
        return self._set(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id))))

    async def wait(self, state: str, timeout_s: int = 300) -> Sandbox:
        """Wait until the sandbox is in state (or a terminal one)."""
        return self._set(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id),
                                                    {"wait": state, "timeout_s": timeout_s})))

    async def update(self, **fields: Any) -> Sandbox:
        """PATCH: idle_timeout_s, on_idle, max_lifetime_s, spend_limit_usd,
        network, labels.

        Example::

            # Let the sandbox reach one API and nothing else.
            await sb.update(network={"allow": ["api.example.com"]})
        """
        return self._set(await self._c._json(sh.Req("PATCH", sh.sandbox_path(self.id), json=sh.drop_none(fields))))

    async def sleep(self, wait: bool = True) -> Sandbox:
        """Put the sandbox to sleep (its memory and files kept, no CPU billed); with ``wait``,
        answered once asleep.

        Example::

            await sb.sleep()  # files and memory kept, no CPU billed
            sb = await client.get(sb.id)
            await sb.wake()
        """
        self._set(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/sleep")))
        return await self.wait("asleep") if wait else self.info

    async def wake(self, wait: bool = True) -> Sandbox:
        """Wake a sleeping sandbox; with ``wait``, answered once running.

        Example::

            sb = await client.get("build")
            await sb.wake()  # answered once running again
        """
        self._set(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/wake")))
        return await self.wait("running") if wait else self.info

    async def snapshot(self, name: str) -> Snapshot:
        """Freeze the sandbox's files (running or asleep) into a snapshot of the team;
        running commands go on.

        Example::

            snap = await sb.snapshot("deps-installed")
            other = await client.create(source=snap.source())
        """
        return Snapshot.from_dict(await self._c._json(
            sh.Req("POST", sh.sandbox_path(self.id) + "/snapshots", json={"name": name})))

    async def restore(self, snapshot: str, wait: bool = True) -> Sandbox:
        """Return the sandbox to a snapshot (ID or name): running commands end as at a
        sleep; its ID, name, network and history stay. With ``wait``, answered once running."""
        params = {"wait": "running"} if wait else {}
        self._set(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/restore", params,
                                             json={"snapshot_id": snapshot})))
        return self.info

    async def fork(self, count: int, *, names: Optional[Sequence[str]] = None,
                   labels: Optional[Mapping[str, str]] = None, wait: bool = True) -> "List[AsyncSandbox]":
        """Make ``count`` new sandboxes from this one's files as they are now; each is
        independent. With ``wait``, answered once they all run.

        Example::

            tries = await sb.fork(5)
        """
        body: Dict[str, Any] = {"count": count}
        if names is not None:
            body["names"] = list(names)
        if labels is not None:
            body["labels"] = dict(labels)
        params = {"wait": "running"} if wait else {}
        d = await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/fork", params, json=body))
        return [AsyncSandbox(self._c, Sandbox.from_dict(x)) for x in d.get("items") or []]

    async def terminate(self) -> Sandbox:
        """Terminate the sandbox: its processes and files are gone."""
        return self._set(await self._c._json(sh.Req("DELETE", sh.sandbox_path(self.id))))

    async def network(self) -> NetworkView:
        """The policy and what the sandbox tried to reach."""
        return NetworkView.from_dict(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/network")))

    async def metrics(self, *, from_: Optional[str] = None, to: Optional[str] = None,
                      step: Optional[str] = None) -> Metrics:
        """Resource samples and the gaps in them (from and to: RFC 3339;
        step: seconds or a duration such as "1m").

        Example::

            m = await sb.metrics(step="1m")
            spent = await sb.usage()
            print(len(m.samples), "samples;", spent.cost_usd, "USD so far")
        """
        return Metrics.from_dict(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/metrics",
                                                            sh.drop_none({"from": from_, "to": to, "step": step}))))

    async def usage(self) -> SandboxUsage:
        """What the sandbox used and cost, its spend limit and price per hour."""
        return SandboxUsage.from_dict(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/usage")))

    async def preview(self, port: int, visibility: str = "private", wake: bool = False) -> Preview:
        """Publish a port over HTTP: {id, url, token, link}; url is the
        preview's own host, <port>-<sandbox id>.<preview domain>."""
        return Preview.from_dict(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/previews",
                                          json={"port": port, "visibility": visibility, "wake": wake},
                                          keyed=visibility != "private")))

    async def previews(self) -> List[Preview]:
        """The sandbox's previews."""
        return [Preview.from_dict(x) for x in (await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/previews"))).get("items") or []]

    async def save_asset(self, path: str, name: Optional[str] = None) -> Asset:
        """Save a folder of the sandbox as an asset of the team (the same
        bytes as an existing asset answer that one)."""
        body = sh.drop_none({"path": path, "name": name})
        return Asset.from_dict(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/assets", json=body)))

    async def delete_preview(self, preview_id: str) -> None:
        """Remove a preview: its URL stops answering."""
        await self._c._json(sh.Req("DELETE", sh.sandbox_path(self.id) + "/previews/" + sh.esc(preview_id)))

    async def run(self, command: Optional[str] = None, *, argv: Optional[Sequence[str]] = None,
                  cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  secrets: Optional[Mapping[str, str]] = None, timeout_s: Optional[int] = None,
                  user: Optional[str] = None, wake: bool = True) -> CommandResult:
        """Run a command to its end; its output comes back as text.

        An asleep sandbox is woken first (one going to sleep or waking is
        waited for); ``wake=False`` raises Conflict instead.

        Example::

            result = await sb.run("pytest -q", timeout_s=600)
            if result.exit_code != 0:
                print(result.stderr)
        """
        body = sh.command_body(command, argv, cwd, env, secrets, timeout_s, False, user, None, None)
        d = await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/commands", sh.command_params(True, wake),
                                       json=body))
        return CommandResult.from_dict(d)

    async def start(self, command: Optional[str] = None, *, argv: Optional[Sequence[str]] = None,
                    cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                    secrets: Optional[Mapping[str, str]] = None, timeout_s: Optional[int] = None,
                    stdin: bool = False, user: Optional[str] = None, pty: Optional[Mapping[str, int]] = None,
                    no_output_alert_s: Optional[int] = None, wake: bool = True,
                    tag: Optional[str] = None) -> "AsyncCommand":
        """Start a command and return at once; see Command. An asleep
        sandbox is woken first, as by run; ``wake=False`` raises Conflict
        instead. ``tag`` is a name of your own for it (at most 256 bytes),
        shown with the command."""
        body = sh.command_body(command, argv, cwd, env, secrets, timeout_s, stdin, user, pty, no_output_alert_s, tag)
        d = await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/commands", sh.command_params(False, wake),
                                       json=body))
        return AsyncCommand(self._c, self.id, CommandInfo.from_dict(d))

    async def command(self, command_id: str) -> "AsyncCommand":
        """A command of this sandbox by ID."""
        d = await self._c._json(sh.Req("GET", sh.command_path(self.id, command_id)))
        return AsyncCommand(self._c, self.id, CommandInfo.from_dict(d))

    async def commands(self, limit: int = 100, cursor: str = "") -> Page[CommandInfo]:
        """One page of the sandbox's commands; ``next_cursor`` asks for the next."""
        params: Dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        d = await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/commands", params))
        return Page([CommandInfo.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")


class AsyncCommand:
    """A started command: iterate its output (resumed after a dropped
    connection), feed its stdin, signal it, wait for it."""

    def __init__(self, client: AsyncClient, sandbox_id: str, info: CommandInfo) -> None:
        self._c = client
        self.sandbox_id = sandbox_id
        self.info = info
        self.id = info.id

    def __repr__(self) -> str:
        return f"<AsyncCommand {self.id} {self.info.state}>"

    def output(self, after: int = 0, follow: bool = True) -> AsyncIterator[Chunk]:
        """Output records after seq ``after`` in order, the exit last. A
        broken connection is resumed from the last record seen, so nothing
        is lost or repeated.

        Example::

            cmd = await sb.start("make build")
            last = 0
            async for chunk in cmd.output():  # resumes by itself after a cut
                last = chunk.seq
                print(chunk.data.decode(), end="")
        """
        return self._c._output(sh.command_path(self.sandbox_id, self.id) + "/output", self.id, after, follow)

    async def wait(self) -> CommandInfo:
        """Wait for the end; the output is read (and dropped) on the way."""
        async for ch in self.output():
            if ch.type == "exit":
                break
        return await self.refresh()

    async def refresh(self) -> CommandInfo:
        """Read the command again; ``info`` holds the answer."""
        d = await self._c._json(sh.Req("GET", sh.command_path(self.sandbox_id, self.id)))
        self.info = CommandInfo.from_dict(d)
        return self.info

    async def write(self, data: Data, eof: bool = False) -> None:
        """Append to the command's stdin (started with stdin=True)."""
        await self._c._json(sh.Req("POST", sh.command_path(self.sandbox_id, self.id) + "/stdin",
                                   {"eof": "true"} if eof else {}, content=sh.read_io(data), keyed=False))

    async def close_stdin(self) -> None:
        """Close the command's stdin (it reads end of file)."""
        await self.write(b"", eof=True)

    async def signal(self, sig: str = "TERM") -> None:
        """Send a signal ("TERM", "KILL", "INT", ...) to the command's process group."""
        await self._c._json(sh.Req("POST", sh.command_path(self.sandbox_id, self.id) + "/signal",
                                   json={"signal": sig}))

    async def stdout(self) -> bytes:
        """The recorded stdout, raw."""
        return (await self._c._send(sh.Req("GET", sh.command_path(self.sandbox_id, self.id) + "/stdout"))).content

    async def stderr(self) -> bytes:
        """The command's recorded stderr, raw."""
        return (await self._c._send(sh.Req("GET", sh.command_path(self.sandbox_id, self.id) + "/stderr"))).content

    async def attach(self, after: int = 0) -> AsyncAttachment:
        """A live connection to the command's terminal or pipes (WebSocket)."""
        return await AsyncAttachment(self._c.url, self._c._key, self.sandbox_id, self.id, after).connect()


class AsyncFiles:
    """A sandbox's files. Paths are absolute inside the sandbox."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._c = client
        self._base = sh.sandbox_path(sandbox_id) + "/files"

    async def list(self, path: str, depth: int = 1) -> List[FileEntry]:
        """The entries under path, ``depth`` levels deep, every page."""
        out: List[FileEntry] = []
        cursor = ""
        while True:
            params: Dict[str, Any] = {"path": path, "depth": depth, "limit": 1000}
            if cursor:
                params["cursor"] = cursor
            d = await self._c._json(sh.Req("GET", self._base, params))
            out += [FileEntry.from_dict(x) for x in d.get("items") or []]
            cursor = d.get("next_cursor", "") or ""
            if not cursor:
                return out

    async def stat(self, path: str) -> FileEntry:
        """One file's entry (NotFound when there is none)."""
        return FileEntry.from_dict(await self._c._json(sh.Req("GET", self._base + "/stat", {"path": path})))

    async def exists(self, path: str) -> bool:
        """Whether path exists."""
        try:
            await self.stat(path)
            return True
        except NotFound:
            return False

    async def read(self, path: str) -> FileContent:
        """The whole file, checked against the server's sha-256.

        Example::

            content = await sb.files.read("/workspace/report.json")
            print(content.data.decode())
        """
        resp = await self._c._send(sh.Req("GET", self._base + "/content", {"path": path}))
        digest = sh.check_digest(path, resp.content, resp.headers.get("Repr-Digest", ""))
        return FileContent(resp.content, sh.version_of(resp.headers.get("ETag", "")), digest)

    async def read_text(self, path: str) -> str:
        """A file's content as UTF-8 text, checked against the server's sha-256."""
        return (await self.read(path)).text

    async def write(self, path: str, data: Data, *, if_version: Optional[str] = None,
                    mode: Optional[str] = None) -> FileEntry:
        """Write a whole file atomically. With ``if_version`` it is written
        only if the file is still at that version (``"none"``: only if it
        does not exist), else PreconditionFailed and nothing changes.

        Example::

            await sb.files.write("/workspace/main.py", "print('hello')\n")
            print((await sb.run("python3 /workspace/main.py")).stdout)
        """
        body = sh.read_io(data)
        params: Dict[str, Any] = {"path": path}
        if mode:
            params["mode"] = mode
        r = sh.Req("PUT", self._base + "/content", params, content=body, headers=sh.write_headers(body, if_version))
        return FileEntry.from_dict(await self._c._json(r))

    async def edit(self, path: str, edits: Sequence[Mapping[str, str]], *,
                   if_version: Optional[str] = None) -> FileEntry:
        """Replace texts: each ``old`` must occur exactly once, else Conflict
        and nothing is written."""
        headers = {"If-Match": '"' + if_version + '"'} if if_version else {}
        r = sh.Req("PATCH", self._base + "/content", {"path": path},
                   json={"edits": [dict(e) for e in edits]}, headers=headers)
        return FileEntry.from_dict(await self._c._json(r))

    async def mkdir(self, path: str) -> FileEntry:
        """Make a folder and its parents."""
        return FileEntry.from_dict(await self._c._json(sh.Req("POST", self._base + "/mkdir", json={"path": path})))

    async def move(self, src: str, dst: str, overwrite: bool = False) -> FileEntry:
        """Move or rename a file or folder; ``overwrite`` replaces what is at dst."""
        body = {"from": src, "to": dst, "overwrite": overwrite}
        return FileEntry.from_dict(await self._c._json(sh.Req("POST", self._base + "/move", json=body)))

    async def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file, or a folder with ``recursive``."""
        params: Dict[str, Any] = {"path": path}
        if recursive:
            params["recursive"] = "true"
        await self._c._json(sh.Req("DELETE", self._base, params))

    async def upload_dir(self, local: str, path: str, exclude: Sequence[str] = ()) -> ArchiveResult:
        """Send a local folder into path (tar.gz), keeping modes, symlinks
        inside it and empty directories; packed into a temporary file, then
        streamed with its sha-256 for the server to check, and streamed
        again from that file when a try is retried.

        Example::

            # The folder's .coveignore files say what stays behind.
            await sb.files.upload_dir("./project", "/workspace/project")
            result = await sb.run("cd /workspace/project && make test")
        """
        with await asyncio.to_thread(sh.pack_dir, local, exclude) as f:
            cm = sh.digested_body(f)
            body, digest = await asyncio.to_thread(cm.__enter__)
            with contextlib.ExitStack() as stack:
                stack.push(cm)  # entered above, in the thread; left here
                return ArchiveResult.from_dict(await self._c._json(sh.Req("PUT", self._base + "/archive", {"path": path},
                                                  content=sh.Rewind(body),
                                                  headers={"Content-Type": "application/gzip", "Repr-Digest": digest})))

    async def download_dir(self, path: str, local: str) -> None:
        """Fetch a folder of the sandbox into local."""
        import tempfile

        with tempfile.TemporaryFile() as tmp:
            resp = await self._c._send(sh.Req("GET", self._base + "/archive", {"path": path}), stream=True)
            try:
                async for b in self._c._bytes(resp):
                    tmp.write(b)
            finally:
                await resp.aclose()
            tmp.seek(0)
            sh.unpack(tmp, local)

    async def watch(self, path: str, *, recursive: bool = False, after: int = 0) -> AsyncIterator[FileEvent]:
        """Follow the changes under a folder as they happen (``recursive``:
        and below it, folders made later included), from after the record
        ``after`` (a record's ``seq``; 0: from now on). A dropped connection
        is resumed after the last record seen, so nothing the server still
        keeps is missed; a record of type ``dropped`` counts changes not
        reported (``count``; 0: an unknown number: list the folder again).
        Ends when the folder or its sandbox is gone.

        Example::

            async for ev in sb.files.watch("/workspace", recursive=True):
                print(ev.seq, ev.type, ev.path)
        """
        seq, failures = after, 0
        while True:
            params: Dict[str, Any] = {"path": path}
            if recursive:
                params["recursive"] = "true"
            if seq:
                params["after"] = seq
            try:
                resp = await self._c._send(sh.Req("GET", self._base + "/watch", params,
                                                  headers={"Accept": "application/x-ndjson"}), stream=True)
                try:
                    async for line in self._c._lines(resp):
                        if not line.strip():
                            continue  # keepalive
                        ev = FileEvent.from_dict(json.loads(line))
                        seq, failures = max(seq, ev.seq), 0
                        yield ev
                finally:
                    await resp.aclose()
                return
            except Unavailable:
                failures += 1
                if failures > STREAM_RETRIES:
                    raise
                await asyncio.sleep(min(0.1 * 2 ** failures, 5))
