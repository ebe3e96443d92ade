"""``analysis report NAME --serve``: the report page on 127.0.0.1, rebuilt as the tables grow.

Only ``/`` and ``/version``, and only for a ``Host:`` naming the server (:func:`allowed_hosts`), against
DNS rebinding: docs/figures.md, "The report".
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from analysis.io import AnalysisError, load

HOST = "127.0.0.1"


def fingerprint(root: str) -> str:
    """Count, total size and newest modification time of the table files that the figure
    cache fingerprints (``analysis.figures.cache.table_files``)."""
    from analysis.figures.cache import table_files

    files = [f for trial in table_files(root).values() for f in trial]
    return f"{len(files)}-{sum(size for _, size, _ in files)}-{max((m for _, _, m in files), default=0)}"


class _Server(ThreadingHTTPServer):
    """Serves ``current``, the last page built and its version, replaced as one tuple: readers
    never see a page with another page's version."""

    current: tuple[bytes, str] = (b"", "")

    def set(self, body: str, version: str) -> None:
        self.current = (body.encode(), version)


def allowed_hosts(port: int) -> frozenset[str]:
    """The ``Host:`` values the server answers: the loopback names it serves, with its
    port (and bare, on port 80)."""
    names = {HOST, "localhost"}
    return frozenset({f"{n}:{port}" for n in names} | (names if port == 80 else set()))


class _Handler(BaseHTTPRequestHandler):
    def _host_ok(self) -> bool:
        """One ``Host:`` header naming this server, and a path (not an absolute URI)."""
        hosts = allowed_hosts(self.server.server_address[1])
        values = self.headers.get_all("Host") or []
        if len(values) != 1 or values[0].strip().lower() not in hosts:
            self.send_error(
                421, "Misdirected Request", f"this server answers only for {', '.join(sorted(hosts))}"
            )
            return False
        if not self.path.startswith("/"):
            self.send_error(400, "Bad Request", "absolute request targets are not served")
            return False
        return True

    def do_GET(self):  # noqa: N802 (http.server API)
        if not self._host_ok():
            return
        body, version = self.server.current
        path = self.path.split("?", 1)[0]
        if path == "/version":
            self._send(version.encode(), "text/plain; charset=utf-8")
        elif path in ("/", "/index.html"):
            self._send(body, "text/html; charset=utf-8")
        else:
            self.send_error(404)

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # quiet: no line per request
        pass


def serve(
    target: str,
    storage: str,
    *,
    port: int,
    interval: float,
    out: Path | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve the report of ``target`` until interrupted (or ``stop`` is set)."""
    from analysis.report import render

    study = load(target, storage)
    server = bind(port)  # before anything is drawn: a busy port is refused with nothing written
    poll_ms = max(int(interval * 1000), 500)

    def build() -> None:
        version = fingerprint(study.root)
        html = render(study.refresh(), version=version, poll_ms=poll_ms)
        server.set(html, version)
        if out is not None:
            write_page(out, render(study, version=version))

    try:
        build()
    except BaseException as exc:
        server.server_close()
        if isinstance(exc, OSError):
            raise AnalysisError(f"cannot build the report: {' '.join(str(exc).split())[:200]}") from None
        raise
    run(server)
    print(
        f"serving the report of {study.name} at http://{HOST}:{server.server_address[1]}/ "
        f"(rebuilt when the tables change, checked every {interval:g} s; Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    stop = stop or threading.Event()
    try:
        while not stop.wait(interval):
            if fingerprint(study.root) != server.current[1]:
                build()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()


def bind(port: int) -> _Server:
    """A server bound to ``HOST:port`` (0: a free port), not serving yet; a port that is
    taken (or not ours to bind) is one line naming it (:class:`AnalysisError`)."""
    try:
        return _Server((HOST, port), _Handler)
    except OSError as exc:
        raise AnalysisError(f"--port: cannot serve on {HOST}:{port}: {exc.strerror or exc}") from None


def run(server: _Server) -> None:
    """Serve ``server.current`` from a daemon thread (see :func:`bind`)."""
    threading.Thread(target=server.serve_forever, daemon=True).start()


def write_page(path: Path, html: str) -> None:
    from study.results.atomicio import write_atomic

    # mode 0644: mkstemp's 0600 would hide the page from a web server / other users
    write_atomic(path, html.encode(), suffix=".html", mode=0o644)


__all__ = ["HOST", "allowed_hosts", "bind", "fingerprint", "run", "serve"]
