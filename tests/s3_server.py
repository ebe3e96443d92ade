"""A local S3-compatible server for tests: moto's, bound to 127.0.0.1 on a free port,
in a thread of the test process, counting every request it answers.

    with LocalS3() as s3:
        s3.make_bucket("b")
        env = {**os.environ, **s3.env}       # AWS_ENDPOINT_URL + dummy credentials
        ... study run --storage s3://b/studies ...
        s3.count()                            # requests so far
"""

from __future__ import annotations

import collections
import threading


class _Counting:
    """WSGI middleware: counts requests by (method, first path segment after the bucket)."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.requests: collections.Counter = collections.Counter()

    def __call__(self, environ, start_response):
        with self.lock:
            self.requests[environ.get("REQUEST_METHOD", "?")] += 1
        return self.app(environ, start_response)


class LocalS3:
    def __init__(self):
        from moto.moto_server.werkzeug_app import MotoRequestHandler
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        class Quiet(MotoRequestHandler):
            def log_request(self, *args, **kwargs):  # no line per request on stderr
                pass

        self.app = _Counting(DomainDispatcherApplication(create_backend_app))
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True, request_handler=Quiet)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def __enter__(self) -> LocalS3:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.thread.join(timeout=10)

    def make_bucket(self, name: str) -> None:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=name)

    def count(self) -> int:
        with self.app.lock:
            return sum(self.app.requests.values())

    def by_method(self) -> dict[str, int]:
        with self.app.lock:
            return dict(self.app.requests)

    def reset(self) -> None:
        with self.app.lock:
            self.app.requests.clear()
