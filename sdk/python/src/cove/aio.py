"""The asyncio client: the same surface as cove.Client, awaited."""

from __future__ import annotations

import asyncio
import contextlib
from typing import IO, Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Union

import httpx

from . import _shared as sh
from ._attach import AsyncAttachment
from .client import STREAM_RETRIES
from .errors import Conflict, CoveError, NotFound, error_from
from .models import (
    ArchiveResult, Asset, Chunk, CommandInfo, CommandResult, CreateTeamResponse, CreateWebhookResponse, Delivery, Event,
    FileContent, FileEntry, Image, KeyResponse, Metrics, NetworkView, Page, Preview, Sandbox, SandboxUsage, Secret, Team,
    TeamMe, Template, Ticket, UsageReport, Webhook, Workload,
)

Data = Union[bytes, str, IO[bytes]]


class AsyncClient:
    """An asyncio cove client; see cove.Client."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, *, timeout: float = 60.0,
                 transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        self.url, self._key = sh.config(url, api_key)
        kw: Dict[str, Any] = {}
        if transport is not None:
            kw["transport"] = transport
        self._http = httpx.AsyncClient(base_url=self.url, headers={"Authorization": "Bearer " + self._key},
                                       timeout=httpx.Timeout(timeout, read=None), **kw)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _send(self, r: sh.Req, stream: bool = False) -> httpx.Response:
        req = self._http.build_request(r.method, r.path, params=r.params or None, json=r.json,
                                       content=r.content, headers=r.headers or None)
        resp = await self._http.send(req, stream=stream)
        if resp.status_code >= 300:
            body = await resp.aread()
            await resp.aclose()
            raise error_from(resp.status_code, body)
        return resp

    async def _json(self, r: sh.Req) -> Any:
        resp = await self._send(r)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    async def _output(self, path: str, what: str, after: int, follow: bool,
                      started: Optional[Any] = None) -> AsyncIterator[Chunk]:
        """See Client._output."""
        seq, failures = after, 0
        while True:
            params: Dict[str, Any] = {"after": seq}
            if follow:
                params["follow"] = "true"
            try:
                resp = await self._send(sh.Req("GET", path, params), stream=True)
                try:
                    async for line in resp.aiter_lines():
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
            except httpx.TransportError:
                pass
            failures += 1
            if failures > STREAM_RETRIES:
                raise CoveError(f"the output stream of {what} broke {failures} times in a row, last after seq {seq}")
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
                     wait: bool = True, keep: bool = False, idempotency_key: Optional[str] = None,
                     **extra: Any) -> "AsyncSandbox":
        res = sh.drop_none({"cpus": cpus, "memory_mib": memory_mib, "disk_mib": disk_mib})
        body = sh.drop_none({
            "name": name, "template": template, "resources": res or None, "env": env, "secrets": secrets,
            "workdir": workdir, "network": network, "source": source, "setup": setup,
            "idle_timeout_s": idle_timeout_s, "on_idle": on_idle, "max_lifetime_s": max_lifetime_s,
            "spend_limit_usd": spend_limit_usd, "labels": labels, "on_budget": on_budget,
            "budget_alerts": list(budget_alerts) if budget_alerts is not None else None, **extra,
        })
        r = sh.Req("POST", "/v1/sandboxes", {"wait": "running"} if wait else {}, json=body)
        if idempotency_key:
            r.headers["Idempotency-Key"] = idempotency_key
        return AsyncSandbox(self, Sandbox.from_dict(await self._json(r)), keep=keep)

    async def get(self, ref: str) -> "AsyncSandbox":
        return AsyncSandbox(self, Sandbox.from_dict(await self._json(sh.Req("GET", sh.sandbox_path(ref)))))

    async def list(self, *, state: Optional[Union[str, Sequence[str]]] = None,
                   labels: Optional[Mapping[str, str]] = None, limit: int = 100) -> AsyncIterator[Sandbox]:
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
                    async for line in resp.aiter_lines():
                        ev = sse.feed(line)
                        if ev is not None:
                            last, failures = ev.id, 0
                            yield ev
                finally:
                    await resp.aclose()
            except httpx.TransportError:
                failures += 1
                if failures > STREAM_RETRIES:
                    raise
                await asyncio.sleep(min(0.1 * 2 ** failures, 5))

    # -- assets --

    async def create_asset(self, data: sh.AssetData, *, name: Optional[str] = None) -> Asset:
        """See Client.create_asset; files are hashed and read in a thread."""
        cm = sh.digested_body(data)
        body, digest = await asyncio.to_thread(cm.__enter__)
        with contextlib.ExitStack() as stack:
            stack.push(cm)  # entered above, in the thread; left here
            content = body if isinstance(body, bytes) else sh.achunks(body)
            return Asset.from_dict(await self._json(sh.asset_req(name, content, digest)))

    async def create_asset_from_file(self, path: str, *, name: Optional[str] = None) -> Asset:
        with open(path, "rb") as f:
            return await self.create_asset(f, name=name)

    async def create_asset_from_dir(self, local: str, *, name: Optional[str] = None,
                                    exclude: Sequence[str] = ()) -> Asset:
        with await asyncio.to_thread(sh.pack_dir, local, exclude) as f:
            return await self.create_asset(f, name=name)

    async def get_asset(self, asset_id: str) -> Asset:
        return Asset.from_dict(await self._json(sh.Req("GET", sh.asset_path(asset_id))))

    async def list_assets(self, limit: int = 100) -> AsyncIterator[Asset]:
        cursor = ""
        while True:
            page = await self.list_assets_page(limit=limit, cursor=cursor)
            for a in page.items:
                yield a
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def list_assets_page(self, limit: int = 100, cursor: str = "") -> Page[Asset]:
        params: Dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        d = await self._json(sh.Req("GET", "/v1/assets", params))
        return Page([Asset.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")

    async def read_asset(self, asset_id: str) -> bytes:
        resp = await self._send(sh.Req("GET", sh.asset_path(asset_id) + "/content"))
        sh.check_digest(asset_id, resp.content, resp.headers.get("Repr-Digest", ""))
        return resp.content

    async def download_asset(self, asset_id: str, local: str) -> None:
        import os

        resp = await self._send(sh.Req("GET", sh.asset_path(asset_id) + "/content"), stream=True)
        try:
            check = sh.DigestCheck(asset_id, resp.headers.get("Repr-Digest", ""))
            with open(local, "wb") as f:
                async for b in resp.aiter_bytes():
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
        await self._json(sh.Req("DELETE", sh.asset_path(asset_id)))

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
        """See Client.submit_workload."""
        body = sh.workload_body(command, argv, template, image, source, env, secrets, workdir, user, cpus,
                                memory_mib, disk_mib, gpus, gpu_type, timeout_s, max_queue_s, labels, extra)
        r = sh.Req("POST", "/v1/workloads", json=body)
        if idempotency_key:
            r.headers["Idempotency-Key"] = idempotency_key
        return Workload.from_dict(await self._json(r))

    async def get_workload(self, workload_id: str, *, wait: Optional[str] = None,
                           timeout_s: Optional[int] = None) -> Workload:
        return Workload.from_dict(await self._json(sh.Req("GET", sh.workload_path(workload_id),
                                                          sh.workload_get_params(wait, timeout_s))))

    async def wait_workload(self, workload_id: str, state: str = "exited", timeout_s: int = 300) -> Workload:
        while True:
            w = await self.get_workload(workload_id, wait=state, timeout_s=timeout_s)
            if w.state == state or w.done:
                return w

    async def list_workloads(self, *, state: Optional[Union[str, Sequence[str]]] = None,
                             limit: int = 100) -> AsyncIterator[Workload]:
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
        d = await self._json(sh.Req("GET", "/v1/workloads", sh.workload_list_params(state, limit, cursor)))
        return Page([Workload.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")

    async def cancel_workload(self, workload_id: str) -> Workload:
        return Workload.from_dict(await self._json(sh.Req("POST", sh.workload_path(workload_id) + "/cancel")))

    def workload_output(self, workload_id: str, after: int = 0, follow: bool = True) -> AsyncIterator[Chunk]:
        """See Client.workload_output."""
        async def started() -> None:
            w = await self.get_workload(workload_id, wait="running", timeout_s=60)
            if w.done and not w.started_at:
                raise Conflict(f"workload {workload_id} is {w.state} and never ran: it has no output", status=409)

        return self._output(sh.workload_path(workload_id) + "/output", workload_id, after, follow, started)

    async def workload_stdout(self, workload_id: str) -> bytes:
        return (await self._send(sh.Req("GET", sh.workload_path(workload_id) + "/stdout"))).content

    async def workload_stderr(self, workload_id: str) -> bytes:
        return (await self._send(sh.Req("GET", sh.workload_path(workload_id) + "/stderr"))).content

    async def import_image(self, data: Union[str, IO[bytes], bytes], *, name: str,
                           settings: Optional[Mapping[str, Any]] = None) -> Image:
        """See Client.import_image; a file is read in a thread as it is sent."""
        if isinstance(data, str):
            f = await asyncio.to_thread(open, data, "rb")
            try:
                return await self.import_image(f, name=name, settings=settings)
            finally:
                f.close()
        body = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else sh.achunks(data)
        return Image.from_dict(await self._json(sh.image_import_req(name, settings, body)))

    async def images(self) -> List[Image]:
        return [Image.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/images"))).get("items") or []]

    async def get_image(self, ref: str) -> Image:
        return Image.from_dict(await self._json(sh.Req("GET", sh.image_path(ref))))

    async def update_image(self, ref: str, **settings: Any) -> Image:
        return Image.from_dict(await self._json(sh.Req("PATCH", sh.image_path(ref), json=sh.drop_none(settings))))

    async def delete_image(self, ref: str) -> None:
        await self._json(sh.Req("DELETE", sh.image_path(ref)))

    async def put_secret(self, name: str, value: str) -> Secret:
        return Secret.from_dict(await self._json(sh.Req("PUT", "/v1/secrets/" + sh.esc(name), json={"value": value})))

    async def get_secret(self, name: str) -> Secret:
        return Secret.from_dict(await self._json(sh.Req("GET", "/v1/secrets/" + sh.esc(name))))

    async def list_secrets(self) -> List[Secret]:
        out: List[Secret] = []
        cursor = ""
        while True:
            d = await self._json(sh.Req("GET", "/v1/secrets", {"cursor": cursor} if cursor else {}))
            out += [Secret.from_dict(x) for x in d.get("items") or []]
            cursor = d.get("next_cursor", "") or ""
            if not cursor:
                return out

    async def delete_secret(self, name: str) -> None:
        await self._json(sh.Req("DELETE", "/v1/secrets/" + sh.esc(name)))

    async def create_webhook(self, url: str, events: Optional[List[str]] = None) -> CreateWebhookResponse:
        body: Dict[str, Any] = {"url": url}
        if events:
            body["events"] = events
        return CreateWebhookResponse.from_dict(await self._json(sh.Req("POST", "/v1/webhooks", json=body)))

    async def list_webhooks(self) -> List[Webhook]:
        out: List[Webhook] = []
        cursor = ""
        while True:
            d = await self._json(sh.Req("GET", "/v1/webhooks", {"cursor": cursor} if cursor else {}))
            out += [Webhook.from_dict(x) for x in d.get("items") or []]
            cursor = d.get("next_cursor", "") or ""
            if not cursor:
                return out

    async def get_webhook(self, webhook_id: str) -> Webhook:
        return Webhook.from_dict(await self._json(sh.Req("GET", "/v1/webhooks/" + sh.esc(webhook_id))))

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._json(sh.Req("DELETE", "/v1/webhooks/" + sh.esc(webhook_id)))

    async def webhook_deliveries(self, webhook_id: str, limit: int = 100) -> List[Delivery]:
        return [Delivery.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/webhooks/" + sh.esc(webhook_id) + "/deliveries", {"limit": str(limit)}))).get("items") or []]

    async def create_team(self, name: str) -> CreateTeamResponse:
        return CreateTeamResponse.from_dict(await self._json(sh.Req("POST", "/v1/teams", json={"name": name})))

    async def list_teams(self) -> List[Team]:
        return [Team.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/teams"))).get("items") or []]

    async def create_key(self, team_id: str) -> KeyResponse:
        return KeyResponse.from_dict(await self._json(sh.Req("POST", "/v1/teams/" + sh.esc(team_id) + "/keys")))

    async def revoke_key(self, key_id: str) -> None:
        await self._json(sh.Req("DELETE", "/v1/keys/" + sh.esc(key_id)))

    async def usage(self, *, from_: Optional[str] = None, to: Optional[str] = None,
                    group_by: Optional[str] = None) -> UsageReport:
        return UsageReport.from_dict(await self._json(sh.Req("GET", "/v1/usage", sh.drop_none({"from": from_, "to": to, "group_by": group_by}))))

    async def update_team(self, team_id: str, **fields: Any) -> Team:
        return Team.from_dict(await self._json(sh.Req("PATCH", "/v1/teams/" + sh.esc(team_id), json=sh.drop_none(fields))))

    async def create_ticket(self, path: str) -> Ticket:
        return Ticket.from_dict(await self._json(sh.Req("POST", "/v1/tickets", json={"path": path})))

    async def team_me(self) -> TeamMe:
        return TeamMe.from_dict(await self._json(sh.Req("GET", "/v1/teams/me")))

    async def set_admission(self, team_id: str, admission: Mapping[str, bool]) -> Team:
        return Team.from_dict(await self._json(sh.Req("PATCH", "/v1/teams/" + sh.esc(team_id), json={"admission": dict(admission)})))

    async def templates(self) -> List[Template]:
        return [Template.from_dict(x) for x in (await self._json(sh.Req("GET", "/v1/templates"))).get("items") or []]

    async def openapi(self) -> Dict[str, Any]:
        return await self._json(sh.Req("GET", "/v1/openapi.json"))


class AsyncSandbox:
    """A sandbox; see cove.client.SandboxHandle."""

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
        return self._set(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id))))

    async def wait(self, state: str, timeout_s: int = 300) -> Sandbox:
        return self._set(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id),
                                                    {"wait": state, "timeout_s": timeout_s})))

    async def update(self, **fields: Any) -> Sandbox:
        return self._set(await self._c._json(sh.Req("PATCH", sh.sandbox_path(self.id), json=sh.drop_none(fields))))

    async def sleep(self, wait: bool = True) -> Sandbox:
        self._set(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/sleep")))
        return await self.wait("asleep") if wait else self.info

    async def wake(self, wait: bool = True) -> Sandbox:
        self._set(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/wake")))
        return await self.wait("running") if wait else self.info

    async def terminate(self) -> Sandbox:
        return self._set(await self._c._json(sh.Req("DELETE", sh.sandbox_path(self.id))))

    async def network(self) -> NetworkView:
        return NetworkView.from_dict(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/network")))

    async def metrics(self, *, from_: Optional[str] = None, to: Optional[str] = None,
                      step: Optional[str] = None) -> Metrics:
        return Metrics.from_dict(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/metrics",
                                                            sh.drop_none({"from": from_, "to": to, "step": step}))))

    async def usage(self) -> SandboxUsage:
        return SandboxUsage.from_dict(await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/usage")))

    async def preview(self, port: int, visibility: str = "private", wake: bool = False) -> Preview:
        return Preview.from_dict(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/previews",
                                          json={"port": port, "visibility": visibility, "wake": wake})))

    async def previews(self) -> List[Preview]:
        return [Preview.from_dict(x) for x in (await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/previews"))).get("items") or []]

    async def save_asset(self, path: str, name: Optional[str] = None) -> Asset:
        body = sh.drop_none({"path": path, "name": name})
        return Asset.from_dict(await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/assets", json=body)))

    async def delete_preview(self, preview_id: str) -> None:
        await self._c._json(sh.Req("DELETE", sh.sandbox_path(self.id) + "/previews/" + sh.esc(preview_id)))

    async def run(self, command: Optional[str] = None, *, argv: Optional[Sequence[str]] = None,
                  cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  secrets: Optional[Mapping[str, str]] = None, timeout_s: Optional[int] = None,
                  user: Optional[str] = None) -> CommandResult:
        body = sh.command_body(command, argv, cwd, env, secrets, timeout_s, False, user, None, None)
        d = await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/commands", {"wait": "true"}, json=body))
        return CommandResult.from_dict(d)

    async def start(self, command: Optional[str] = None, *, argv: Optional[Sequence[str]] = None,
                    cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                    secrets: Optional[Mapping[str, str]] = None, timeout_s: Optional[int] = None,
                    stdin: bool = False, user: Optional[str] = None, pty: Optional[Mapping[str, int]] = None,
                    no_output_alert_s: Optional[int] = None) -> "AsyncCommand":
        body = sh.command_body(command, argv, cwd, env, secrets, timeout_s, stdin, user, pty, no_output_alert_s)
        d = await self._c._json(sh.Req("POST", sh.sandbox_path(self.id) + "/commands", json=body))
        return AsyncCommand(self._c, self.id, CommandInfo.from_dict(d))

    async def command(self, command_id: str) -> "AsyncCommand":
        d = await self._c._json(sh.Req("GET", sh.command_path(self.id, command_id)))
        return AsyncCommand(self._c, self.id, CommandInfo.from_dict(d))

    async def commands(self, limit: int = 100, cursor: str = "") -> Page[CommandInfo]:
        params: Dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        d = await self._c._json(sh.Req("GET", sh.sandbox_path(self.id) + "/commands", params))
        return Page([CommandInfo.from_dict(x) for x in d.get("items") or []], d.get("next_cursor", "") or "")


class AsyncCommand:
    """A started command; see cove.client.Command."""

    def __init__(self, client: AsyncClient, sandbox_id: str, info: CommandInfo) -> None:
        self._c = client
        self.sandbox_id = sandbox_id
        self.info = info
        self.id = info.id

    def __repr__(self) -> str:
        return f"<AsyncCommand {self.id} {self.info.state}>"

    def output(self, after: int = 0, follow: bool = True) -> AsyncIterator[Chunk]:
        return self._c._output(sh.command_path(self.sandbox_id, self.id) + "/output", self.id, after, follow)

    async def wait(self) -> CommandInfo:
        async for ch in self.output():
            if ch.type == "exit":
                break
        return await self.refresh()

    async def refresh(self) -> CommandInfo:
        d = await self._c._json(sh.Req("GET", sh.command_path(self.sandbox_id, self.id)))
        self.info = CommandInfo.from_dict(d)
        return self.info

    async def write(self, data: Data, eof: bool = False) -> None:
        await self._c._json(sh.Req("POST", sh.command_path(self.sandbox_id, self.id) + "/stdin",
                                   {"eof": "true"} if eof else {}, content=sh.read_io(data)))

    async def close_stdin(self) -> None:
        await self.write(b"", eof=True)

    async def signal(self, sig: str = "TERM") -> None:
        await self._c._json(sh.Req("POST", sh.command_path(self.sandbox_id, self.id) + "/signal",
                                   json={"signal": sig}))

    async def stdout(self) -> bytes:
        return (await self._c._send(sh.Req("GET", sh.command_path(self.sandbox_id, self.id) + "/stdout"))).content

    async def stderr(self) -> bytes:
        return (await self._c._send(sh.Req("GET", sh.command_path(self.sandbox_id, self.id) + "/stderr"))).content

    async def attach(self, after: int = 0) -> AsyncAttachment:
        return await AsyncAttachment(self._c.url, self._c._key, self.sandbox_id, self.id, after).connect()


class AsyncFiles:
    """A sandbox's files; see cove.client.Files."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._c = client
        self._base = sh.sandbox_path(sandbox_id) + "/files"

    async def list(self, path: str, depth: int = 1) -> List[FileEntry]:
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
        return FileEntry.from_dict(await self._c._json(sh.Req("GET", self._base + "/stat", {"path": path})))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
            return True
        except NotFound:
            return False

    async def read(self, path: str) -> FileContent:
        resp = await self._c._send(sh.Req("GET", self._base + "/content", {"path": path}))
        digest = sh.check_digest(path, resp.content, resp.headers.get("Repr-Digest", ""))
        return FileContent(resp.content, sh.version_of(resp.headers.get("ETag", "")), digest)

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).text

    async def write(self, path: str, data: Data, *, if_version: Optional[str] = None,
                    mode: Optional[str] = None) -> FileEntry:
        body = sh.read_io(data)
        params: Dict[str, Any] = {"path": path}
        if mode:
            params["mode"] = mode
        r = sh.Req("PUT", self._base + "/content", params, content=body, headers=sh.write_headers(body, if_version))
        return FileEntry.from_dict(await self._c._json(r))

    async def edit(self, path: str, edits: Sequence[Mapping[str, str]], *,
                   if_version: Optional[str] = None) -> FileEntry:
        headers = {"If-Match": '"' + if_version + '"'} if if_version else {}
        r = sh.Req("PATCH", self._base + "/content", {"path": path},
                   json={"edits": [dict(e) for e in edits]}, headers=headers)
        return FileEntry.from_dict(await self._c._json(r))

    async def mkdir(self, path: str) -> FileEntry:
        return FileEntry.from_dict(await self._c._json(sh.Req("POST", self._base + "/mkdir", json={"path": path})))

    async def move(self, src: str, dst: str, overwrite: bool = False) -> FileEntry:
        body = {"from": src, "to": dst, "overwrite": overwrite}
        return FileEntry.from_dict(await self._c._json(sh.Req("POST", self._base + "/move", json=body)))

    async def remove(self, path: str, recursive: bool = False) -> None:
        params: Dict[str, Any] = {"path": path}
        if recursive:
            params["recursive"] = "true"
        await self._c._json(sh.Req("DELETE", self._base, params))

    async def upload_dir(self, local: str, path: str, exclude: Sequence[str] = ()) -> ArchiveResult:
        with await asyncio.to_thread(sh.pack_dir, local, exclude) as f:
            cm = sh.digested_body(f)
            body, digest = await asyncio.to_thread(cm.__enter__)
            with contextlib.ExitStack() as stack:
                stack.push(cm)  # entered above, in the thread; left here
                return ArchiveResult.from_dict(await self._c._json(sh.Req("PUT", self._base + "/archive", {"path": path},
                                                  content=sh.achunks(body),
                                                  headers={"Content-Type": "application/gzip", "Repr-Digest": digest})))

    async def download_dir(self, path: str, local: str) -> None:
        import tempfile

        with tempfile.TemporaryFile() as tmp:
            resp = await self._c._send(sh.Req("GET", self._base + "/archive", {"path": path}), stream=True)
            try:
                async for b in resp.aiter_bytes():
                    tmp.write(b)
            finally:
                await resp.aclose()
            tmp.seek(0)
            sh.unpack(tmp, local)
