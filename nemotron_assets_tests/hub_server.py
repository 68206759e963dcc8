"""A loopback stand-in for the Hugging Face Hub: just what ``HfApi.create_repo`` and ``HfApi.upload_folder`` call
without hf_xet (``HF_HUB_DISABLE_XET=1``), as huggingface_hub 2.4.0 sends it (its hf_api.py, _commit_api.py, lfs.py):

    POST /api/repos/create                              {"name", "organization", "type", "visibility"} -> {"url"}
    POST /api/validate-yaml                             the README's metadata: {"errors": [], "warnings": []}
    POST /api/datasets/<repo>/preupload/<revision>      per file: uploadMode (lfs or regular), shouldIgnore, oid
    POST /datasets/<repo>.git/info/lfs/objects/batch    per object: an upload action, or none when it is stored
    PUT  /lfs/<oid>                                     the object's bytes (checked against the oid)
    POST /api/datasets/<repo>/commit/<revision>         ndjson: header, file (base64), lfsFile (oid), deletedFile
    GET  /api/datasets/<repo>/revision/<revision>       {"id", "sha"} (asked when a commit would change nothing)

Files are LFS when the Hub's default .gitattributes would make them so (here: .parquet, .zst, .npy, .arrow) or
larger than 10 MB, else regular. The state (repos, their files, the stored LFS objects, every request) is in memory
and readable by the test. ``hold_uploads_after=N``: LFS uploads after the first N are held (never answered) until
``release()``, so a test can kill the client midway; ``settle()`` then waits until the killed client's last requests
(held, or still being read) are done, so they are not counted with the next client's.
"""

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".parquet", ".zst", ".npy", ".arrow")
REGULAR_LIMIT = 10 * 1024 * 1024


@dataclass
class Repo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    def __init__(self, hold_uploads_after: int | None = None) -> None:
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}  # sha256 -> bytes
        self.requests: list[tuple[str, str]] = []
        self.uploads: list[str] = []  # the oid of each LFS upload received, in order
        self.hold_uploads_after = hold_uploads_after
        self.upload_held = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._connections = threading.Condition()
        self._open = 0  # connections being handled
        self._last_opened = time.monotonic()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> "HubServer":
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()
        self._http.shutdown()
        self._http.server_close()

    def release(self) -> None:
        """Stop holding uploads (held ones are then dropped: their client is gone)."""
        self.hold_uploads_after = None
        self._release.set()

    def settle(self, quiet: float = 1.0, timeout: float = 60.0) -> None:
        """Wait until no connection is open and none has opened for ``quiet`` seconds (longer than the server's 0.5 s
        poll, so a request a killed client left queued is accepted and answered first)."""
        deadline = time.monotonic() + timeout
        with self._connections:
            while self._open or time.monotonic() - self._last_opened < quiet:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the Hub still had {self._open} connection(s) open after {timeout} s")
                self._connections.wait(0.1)

    def _connection(self, opened: bool) -> None:
        with self._connections:
            self._open += 1 if opened else -1
            if opened:
                self._last_opened = time.monotonic()
            self._connections.notify_all()

    # --- the API --------------------------------------------------------------------------------------------------
    def create_repo(self, body: dict) -> tuple[int, dict]:
        repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
        if repo_id in self.repos:
            return 409, {"error": "You already created this dataset repo", "url": self._url(repo_id)}
        self.repos[repo_id] = Repo(private=body.get("visibility", "public") == "private")
        return 200, {"url": self._url(repo_id), "name": repo_id}

    def preupload(self, repo_id: str, body: dict) -> tuple[int, dict]:
        repo = self.repos[repo_id]
        files = []
        for entry in body["files"]:
            path, size = entry["path"], entry["size"]
            lfs = path.endswith(LFS_SUFFIXES) or size > REGULAR_LIMIT
            stored = repo.files.get(path)
            oid = None if stored is None else (hashlib.sha256(stored).hexdigest() if lfs else git_blob_oid(stored))
            files.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
        return 200, {"files": files}

    def lfs_batch(self, body: dict) -> tuple[int, dict]:
        objects = []
        for entry in body["objects"]:
            answer = {"oid": entry["oid"], "size": entry["size"]}
            if entry["oid"] not in self.lfs:
                answer["actions"] = {"upload": {"href": f"{self.endpoint}/lfs/{entry['oid']}", "header": {}}}
            objects.append(answer)
        return 200, {"transfer": "basic", "objects": objects}

    def lfs_upload(self, oid: str, data: bytes) -> tuple[int, dict]:
        with self._lock:
            self.uploads.append(oid)
            held = self.hold_uploads_after is not None and len(self.uploads) > self.hold_uploads_after
        if held:
            self.upload_held.set()
            self._release.wait()
            return 503, {"error": "dropped"}
        if hashlib.sha256(data).hexdigest() != oid:
            return 400, {"error": "sha256 mismatch"}
        self.lfs[oid] = data
        return 200, {}

    def commit(self, repo_id: str, lines: list[dict]) -> tuple[int, dict]:
        repo = self.repos[repo_id]
        changed = dict(repo.files)
        for line in lines[1:]:
            value = line["value"]
            if line["key"] == "file":
                changed[value["path"]] = base64.b64decode(value["content"])
            elif line["key"] == "lfsFile":
                if value["oid"] not in self.lfs:
                    return 422, {"error": f"LFS object {value['oid']} of {value['path']} was never uploaded"}
                changed[value["path"]] = self.lfs[value["oid"]]
            elif line["key"] == "deletedFile":
                changed.pop(value["path"], None)
        repo.files = changed
        oid = hashlib.sha1(json.dumps(sorted((p, hashlib.sha256(d).hexdigest()) for p, d in changed.items())).encode()
                           + str(len(repo.commits)).encode()).hexdigest()
        repo.commits.append(oid)
        return 200, {"commitUrl": f"{self._url(repo_id)}/commit/{oid}", "commitOid": oid}

    def revision(self, repo_id: str) -> tuple[int, dict]:
        repo = self.repos[repo_id]
        return 200, {"id": repo_id, "sha": repo.commits[-1] if repo.commits else "0" * 40, "private": repo.private,
                     "siblings": [{"rfilename": path} for path in sorted(repo.files)]}

    def _url(self, repo_id: str) -> str:
        return f"{self.endpoint}/datasets/{repo_id}"


_REPO = r"(?P<repo>[^/]+/[^/]+)"
_ROUTES = [
    ("POST", re.compile(r"^/api/repos/create$"), lambda hub, m, body: hub.create_repo(json.loads(body))),
    ("POST", re.compile(r"^/api/validate-yaml$"), lambda hub, m, body: (200, {"errors": [], "warnings": []})),
    ("POST", re.compile(rf"^/api/datasets/{_REPO}/preupload/[^/]+$"),
     lambda hub, m, body: hub.preupload(m["repo"], json.loads(body))),
    ("POST", re.compile(rf"^/datasets/{_REPO}\.git/info/lfs/objects/batch$"),
     lambda hub, m, body: hub.lfs_batch(json.loads(body))),
    ("PUT", re.compile(r"^/lfs/(?P<oid>[0-9a-f]{64})$"), lambda hub, m, body: hub.lfs_upload(m["oid"], body)),
    ("POST", re.compile(rf"^/api/datasets/{_REPO}/commit/[^/]+$"),
     lambda hub, m, body: hub.commit(m["repo"], [json.loads(line) for line in body.splitlines() if line.strip()])),
    ("GET", re.compile(rf"^/api/datasets/{_REPO}/revision/[^/]+$"), lambda hub, m, body: hub.revision(m["repo"])),
]


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
            pass

        def handle(self) -> None:
            hub._connection(opened=True)
            try:
                super().handle()
            finally:
                hub._connection(opened=False)

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            hub.requests.append((method, path))
            for route_method, pattern, answer in _ROUTES:
                match = pattern.match(path)
                if route_method == method and match:
                    status, payload = answer(hub, match, body)
                    break
            else:
                status, payload = 404, {"error": f"no route {method} {path}"}
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

    return Handler
