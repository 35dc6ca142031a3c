"""Resumable, checksummed downloads against a real HTTP server on 127.0.0.1 (nothing leaves the host)."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from voiced.errors import ModelError
from voiced.models.catalog import CatalogEntry, CatalogFile, ModelKind
from voiced.models.download import DownloadOptions, download
from voiced.models.store import ModelStore
from voiced.runtime.backoff import BackoffPolicy

BLOB = os.urandom(300 * 1024 + 123)
SHA = hashlib.sha256(BLOB).hexdigest()
FAST = BackoffPolicy(initial=0.01, maximum=0.01, jitter=0.0)


@dataclass
class Behaviour:
    honour_range: bool = True
    drop_after: int | None = None
    """Bytes sent before the connection is cut, for the next ``drops`` requests."""
    drops: int = 0
    requests: list[str | None] = field(default_factory=list)
    """The Range header of every request (None: none)."""


class Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour
    files: dict[str, bytes]

    def do_GET(self) -> None:
        b = self.behaviour
        b.requests.append(self.headers.get("Range"))
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        if rng and b.honour_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        payload = body[start:]
        if b.drops > 0 and b.drop_after is not None:
            b.drops -= 1
            payload = payload[: b.drop_after]  # promised more, then the connection closes
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, Behaviour]]:
    behaviour = Behaviour()
    handler = type("H", (Handler,), {"behaviour": behaviour, "files": {"/blob.bin": BLOB, "/model.onnx": BLOB}})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", behaviour
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_download_checks_the_checksum(server, tmp_path) -> None:
    url, behaviour = server
    dest = tmp_path / "blob.bin"
    assert download(f"{url}/blob.bin", dest, sha256=SHA, size=len(BLOB), options=DownloadOptions(progress=False)) == SHA
    assert dest.read_bytes() == BLOB and not (tmp_path / "blob.bin.part").exists()
    assert behaviour.requests == [None]


def test_bad_checksum_is_refused_and_the_partial_file_removed(server, tmp_path) -> None:
    url, _ = server
    dest = tmp_path / "blob.bin"
    wrong = "0" * 64
    with pytest.raises(ModelError) as err:
        download(f"{url}/blob.bin", dest, sha256=wrong, options=DownloadOptions(progress=False))
    msg = str(err.value)
    assert f"{url}/blob.bin" in msg and wrong in msg and SHA in msg and "removed" in msg
    assert not dest.exists() and not (tmp_path / "blob.bin.part").exists()


def test_an_interrupted_download_resumes_with_a_range_request(server, tmp_path) -> None:
    url, behaviour = server
    behaviour.drop_after, behaviour.drops = 100_000, 1
    dest = tmp_path / "blob.bin"
    options = DownloadOptions(progress=False, retries=0, backoff=FAST)
    with pytest.raises(ModelError, match="100000 bytes kept in .*blob.bin.part, run the command again to resume"):
        download(f"{url}/blob.bin", dest, sha256=SHA, options=options)
    assert (tmp_path / "blob.bin.part").stat().st_size == 100_000
    assert download(f"{url}/blob.bin", dest, sha256=SHA, options=options) == SHA  # the next run
    assert behaviour.requests == [None, "bytes=100000-"]
    assert dest.read_bytes() == BLOB


def test_retries_resume_within_one_call(server, tmp_path, capsys) -> None:
    url, behaviour = server
    behaviour.drop_after, behaviour.drops = 50_000, 2
    dest = tmp_path / "blob.bin"
    download(f"{url}/blob.bin", dest, sha256=SHA, options=DownloadOptions(retries=3, backoff=FAST))
    assert behaviour.requests == [None, "bytes=50000-", "bytes=100000-"]
    assert dest.read_bytes() == BLOB
    err = capsys.readouterr().err
    assert "resuming at 0.1 MB" in err and "100.0%" in err  # progress on stderr


def test_a_server_ignoring_range_starts_over(server, tmp_path) -> None:
    url, behaviour = server
    behaviour.honour_range = False
    (tmp_path / "blob.bin.part").write_bytes(BLOB[:1000])
    download(f"{url}/blob.bin", tmp_path / "blob.bin", sha256=SHA, options=DownloadOptions(progress=False))
    assert (tmp_path / "blob.bin").read_bytes() == BLOB and behaviour.requests == ["bytes=1000-"]


def test_http_errors_are_named(server, tmp_path) -> None:
    url, _ = server
    with pytest.raises(ModelError, match="HTTP 404"):
        download(f"{url}/missing.onnx", tmp_path / "x", sha256=None, options=DownloadOptions(progress=False))


def entry(url: str, sha256: str | None) -> CatalogEntry:
    return CatalogEntry(name="test-model", kind=ModelKind.VAD, description="served by the test",
                        files=(CatalogFile(f"{url}/model.onnx", "model.onnx", sha256),), license="MIT",
                        provenance="test")


def test_pull_installs_a_checksummed_entry(server, tmp_path) -> None:
    url, _ = server
    store = ModelStore(tmp_path / "store")
    model = store.pull(entry(url, SHA), options=DownloadOptions(progress=False))
    assert (model.path / "model.onnx").read_bytes() == BLOB
    assert model.files["model.onnx"]["sha256"] == SHA and model.catalog == "test-model"
    assert store.verify("test-model").ok
    assert not (tmp_path / "store" / ".downloads" / "test-model").exists()


def test_pull_with_a_bad_checksum_installs_nothing(server, tmp_path) -> None:
    url, _ = server
    store = ModelStore(tmp_path / "store")
    with pytest.raises(ModelError, match="expected sha256 1111"):
        store.pull(entry(url, "1" * 64), options=DownloadOptions(progress=False))
    assert store.list() == []
    assert not list((tmp_path / "store").rglob("*.part")) and not list((tmp_path / "store").rglob("model.onnx"))


def test_pull_refuses_an_entry_without_a_checksum_unless_told(server, tmp_path) -> None:
    url, behaviour = server
    store = ModelStore(tmp_path / "store")
    with pytest.raises(ModelError, match="no verified sha256 for model.onnx.*--insecure-skip-checksum"):
        store.pull(entry(url, None))
    assert behaviour.requests == []  # refused before any download
    model = store.pull(entry(url, None), insecure_skip_checksum=True, options=DownloadOptions(progress=False))
    assert model.files["model.onnx"]["sha256"] == SHA  # what was seen is recorded, so verify catches later changes
