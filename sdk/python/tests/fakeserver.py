"""A scripted HTTP server on loopback, for what a real cove server cannot be
made to do on demand: answer 429, 503 or 409 with Retry-After, or never
answer."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

# An answer: status, headers, JSON body (None for none).
Answer = Tuple[int, Dict[str, str], Any]


class Seen:
    """One request as the server got it, with when (time.monotonic)."""

    def __init__(self, method: str, path: str, headers: Dict[str, str], at: float, body: bytes = b"") -> None:
        self.method, self.path, self.headers, self.at, self.body = method, path, headers, at, body

    def json(self) -> Any:
        return json.loads(self.body)


class FakeServer:
    """Answers each request with the next of ``answers`` (the last one
    again once they run out), or with what ``answer(seen)`` returns."""

    def __init__(self, answers: Optional[List[Answer]] = None,
                 answer: Optional[Callable[[Seen], Answer]] = None) -> None:
        self.seen: List[Seen] = []
        self._answers = list(answers or [])
        self._answer = answer
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, time.monotonic(), body)
                status, headers, body = outer._next(seen)
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def _next(self, seen: Seen) -> Answer:
        with self._lock:
            self.seen.append(seen)
            if self._answer is not None:
                return self._answer(seen)
            return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def error(status: int, code: str, headers: Optional[Dict[str, str]] = None) -> Answer:
    return status, headers or {}, {"error": {"code": code, "message": code}}


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class SilentServer:
    """Accepts connections and reads, but never answers."""

    def __init__(self) -> None:
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.url = "http://127.0.0.1:%d" % self.ls.getsockname()[1]
        self.conns: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self) -> None:
        self.ls.close()
        for c in self.conns:
            c.close()
