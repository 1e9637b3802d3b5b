"""Previews, templates and the key's own team against a real server."""

import uuid
from urllib.parse import urlsplit

import httpx
import pytest

import cove

TOKEN_HEADER = "Cove-Preview-Token"


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# Waits (in the sandbox) until the app answers, so that the preview is
# asked only once something listens.
SERVING = "for i in $(seq 1 200); do curl -fs -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.05; done; exit 1"


def test_templates_and_team_me(server):
    with cove.Client(*server) as c:
        me = c.team_me()
        assert me["admin"] is True and me["team"]["id"]
        assert "preview" in me["admitted"]
        managed = [t for t in c.templates() if t["name"] == "managed"]
        assert managed and managed[0]["status"] == "ready"


def via_host(api_url: str, preview_url: str, path: str, headers=None) -> httpx.Response:
    """A request to a preview's own host, sent to the server's address (the
    test resolves no preview domain): the Host header names the preview."""
    return httpx.get(api_url + path, headers={"Host": urlsplit(preview_url).netloc, **(headers or {})})


def test_preview_private_by_host(server):
    url, key = server
    with cove.Client(url, key) as c, c.create(name=name("py-preview")) as sb:
        sb.files.write(sb.info.workdir + "/index.html", "hello preview\n")
        sb.start("exec python3 -m http.server 8000", cwd=sb.info.workdir)
        assert sb.run(SERVING).exit_code == 0
        p = sb.preview(8000)
        assert p["id"].startswith("prv_") and p["visibility"] == "private" and p["token"]
        assert urlsplit(p["url"]).hostname == "8000-" + sb.id + ".localhost", p["url"]
        assert "path_url" not in p
        r = via_host(url, p["url"], "/index.html", {TOKEN_HEADER: p["token"]})
        assert (r.status_code, r.text) == (200, "hello preview\n")
        assert via_host(url, p["url"], "/index.html").status_code == 401
        listed = sb.previews()
        assert [x["id"] for x in listed] == [p["id"]] and "token" not in listed[0]
        assert listed[0]["url"] == p["url"]
        with pytest.raises(cove.Conflict):
            sb.preview(8000)
        sb.delete_preview(p["id"])
        assert sb.previews() == []
        with pytest.raises(cove.NotFound):
            sb.delete_preview(p["id"])
