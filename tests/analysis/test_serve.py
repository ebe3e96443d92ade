"""`analysis report --serve` answers only for the loopback names it serves: a request
whose ``Host:`` header names anything else (DNS rebinding: a web page whose domain
now resolves to 127.0.0.1) gets 421 and never the report."""

from __future__ import annotations

import socket

import pytest

from analysis.serve import bind, run

SECRET = "<html><body>report of study s: best_test_acc 0.15</body></html>"


@pytest.fixture(scope="module")
def server():
    srv = bind(0)
    srv.set(SECRET, "v1")
    run(srv)
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def request(port: int, head: str) -> tuple[int, str]:
    """Send ``head`` (request line and headers, as a browser or an attacker would) over a
    real socket; the status code and the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks).decode("utf-8", "replace")
    return int(answer.split(" ", 2)[1]), answer


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"])
@pytest.mark.parametrize("path", ["/", "/version"])
def test_the_loopback_names_get_the_page(server, host, path):
    code, answer = request(
        server, f"GET {path} HTTP/1.1\nHost: {host.format(port=server)}\nConnection: close"
    )
    assert code == 200
    assert (SECRET if path == "/" else "v1") in answer


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example:{port}",  # the rebinding page's own name
        "attacker.example",
        "127.0.0.1.attacker.example:{port}",
        "localhost.attacker.example:{port}",
        "127.0.0.1:{port}.attacker.example",
        "127.0.0.1:{other}",  # another port: another origin
        "127.0.0.1",  # no port (only port 80 may omit it)
        "localhost",
        "[::1]:{port}",  # not bound here
        "0.0.0.0:{port}",
        "127.0.0.2:{port}",
        "",
    ],
    ids=lambda h: h or "empty",
)
@pytest.mark.parametrize("path", ["/", "/version", "/index.html"])
def test_a_foreign_host_gets_421_and_no_page(server, host, path):
    value = host.format(port=server, other=server + 1)
    code, answer = request(server, f"GET {path} HTTP/1.1\nHost: {value}\nConnection: close")
    assert code == 421, answer
    assert SECRET not in answer and "v1" not in answer.split("\r\n\r\n", 1)[-1]


@pytest.mark.parametrize(
    "head",
    [
        "GET / HTTP/1.1\nConnection: close",  # no Host
        "GET / HTTP/1.0",  # HTTP/1.0, no Host
        "GET / HTTP/1.1\nHost: 127.0.0.1:{port}\nHost: attacker.example\nConnection: close",  # two Hosts
        "GET / HTTP/1.1\nHost: attacker.example\nHost: 127.0.0.1:{port}\nConnection: close",
        "GET http://attacker.example/ HTTP/1.1\nHost: 127.0.0.1:{port}\nConnection: close",  # absolute target
    ],
    ids=["no_host", "http10_no_host", "good_then_foreign", "foreign_then_good", "absolute_uri"],
)
def test_missing_doubled_or_overridden_host_gets_no_page(server, head):
    code, answer = request(server, head.format(port=server))
    assert code in (400, 421), answer
    assert SECRET not in answer


def test_the_served_report_refuses_a_foreign_host(tmp_path, monkeypatch):
    """End to end: ``serve`` of a real (empty) study, asked under a foreign name."""
    import threading
    import time

    from analysis import serve as S

    (tmp_path / "s" / "tables").mkdir(parents=True)
    (tmp_path / "s" / "study.json").write_text('{"name": "s"}')
    started, stop = {}, threading.Event()
    real_run = S.run

    def spy(server):
        real_run(server)
        started["server"] = server

    monkeypatch.setattr(S, "run", spy)
    try:
        t = threading.Thread(
            target=S.serve,
            args=(str(tmp_path / "s"), str(tmp_path)),
            kwargs={"port": 0, "interval": 0.2, "stop": stop},
            daemon=True,
        )
        t.start()
        deadline = time.monotonic() + 120
        while "server" not in started and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        port = started["server"].server_address[1]
        code, answer = request(port, f"GET / HTTP/1.1\nHost: attacker.example:{port}\nConnection: close")
        assert code == 421 and "data-version" not in answer
        code, answer = request(port, f"GET / HTTP/1.1\nHost: localhost:{port}\nConnection: close")
        assert code == 200 and "data-version" in answer
    finally:
        stop.set()
        t.join(30)
