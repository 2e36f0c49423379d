"""megxla.hub: hubconf.py from a local directory and from a git host (a local bare repository), pretrained
weights from file URLs, and network failures that end fast with the URL and cache path in the message."""
import hashlib
import os
import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import megxla as mge
import megxla.module as M
from megxla import hub
from megxla.hub.exceptions import DownloadError, GitPullError, InvalidRepo

HUBCONF = '''
"""Test models."""
import megxla.module as M
import megxla.module as M
from megxla import hub

dependencies = ["numpy"]


@hub.pretrained({url!r})
def tiny(bias=True):
    """A 3 -> 2 linear layer."""
    return M.Linear(3, 2, bias=bias)


def _private():
    return 0
'''


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MGE_HOME", str(tmp_path / "mge_home"))
    return tmp_path / "mge_home"


def _weights(tmp_path):
    import megxla.module as M
    ref = M.Linear(3, 2)
    ref.weight._reset(mge.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
    path = tmp_path / "tiny.pkl"
    mge.save(ref.state_dict(), str(path))
    return ref, path


def _repo(tmp_path, url):
    d = tmp_path / "repo"
    d.mkdir()
    (d / "hubconf.py").write_text(HUBCONF.format(url=url))
    return d


def test_local_hubconf_list_help_load(tmp_path, home):
    ref, path = _weights(tmp_path)
    repo = _repo(tmp_path, path.as_uri())
    assert hub.list(str(repo)) == ["_private", "tiny"]  # MegEngine lists every non-dunder callable
    assert "3 -> 2" in hub.help(str(repo), "tiny")
    m = hub.load(str(repo), "tiny", bias=False)
    assert m.bias is None and m.weight.shape == (2, 3)
    assert hasattr(hub.import_module(str(repo), git_host="github.com"), "tiny")
    with pytest.raises(RuntimeError, match="cannot find callable 'nope'"):
        hub.load(str(repo), "nope")


def test_pretrained_file_url_downloads_once(tmp_path, home):
    ref, path = _weights(tmp_path)
    repo = _repo(tmp_path, path.as_uri())
    m = hub.load(str(repo), "tiny", pretrained=True)
    np.testing.assert_array_equal(m.weight.numpy(), ref.weight.numpy())
    cached = os.listdir(home / "serialized")
    assert len(cached) == 1 and cached[0].endswith("_tiny.pkl")
    os.remove(path)  # the cached copy is used from now on
    m2 = hub.load(str(repo), "tiny", pretrained=True)
    np.testing.assert_array_equal(m2.weight.numpy(), ref.weight.numpy())
    assert hub.load(str(repo), "tiny").weight.numpy().tolist() != ref.weight.numpy().tolist()


def test_load_serialized_obj_plain_path_and_corrupt_cache(tmp_path, home):
    _, path = _weights(tmp_path)
    assert set(hub.load_serialized_obj_from_url(str(path))) == {"weight", "bias"}
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(RuntimeError, match="not a file saved by megxla.save"):
        hub.load_serialized_obj_from_url(bad.as_uri(), model_dir=str(tmp_path / "cache"))
    assert os.listdir(tmp_path / "cache") == []  # the corrupt copy does not poison the cache


def test_offline_error_is_fast_and_names_url_and_cache(tmp_path, home):
    url = "http://127.0.0.1:9/weights/tiny.pkl"  # discard port: connection refused
    t = time.time()
    with pytest.raises(DownloadError) as info:
        hub.load_serialized_obj_from_url(url)
    assert time.time() - t < 10
    msg = str(info.value)
    assert url in msg and str(home / "serialized") in msg
    assert os.listdir(home / "serialized") == []  # no partial file left behind


def test_stalled_server_times_out(tmp_path, home, monkeypatch):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    conns = []
    th = threading.Thread(target=lambda: conns.append(srv.accept()), daemon=True)
    th.start()
    monkeypatch.setenv("MEGXLA_HUB_TIMEOUT", "1")
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/w.pkl"
    t = time.time()
    try:
        with pytest.raises(DownloadError, match="timed out|timeout"):
            hub.load_serialized_obj_from_url(url)
    finally:
        srv.close()
    assert time.time() - t < 10


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")
def test_git_host_clone_tag_and_cache(tmp_path, home):
    _, path = _weights(tmp_path)
    work = _repo(tmp_path, path.as_uri())
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    run = lambda *a, cwd=work: subprocess.run(["git", *a], cwd=cwd, env=env, check=True, capture_output=True)
    run("init", "-q")
    run("add", "hubconf.py")
    run("commit", "-q", "-m", "models")
    run("tag", "v1")
    hosts = tmp_path / "hosts" / "owner"
    hosts.mkdir(parents=True)
    run("clone", "-q", "--bare", str(work), str(hosts / "models.git"), cwd=tmp_path)
    host = (tmp_path / "hosts").as_uri()
    m = hub.load("owner/models:v1", "tiny", git_host=host, pretrained=True)
    assert m.weight.shape == (2, 3)
    assert "tiny" in hub.list("owner/models", git_host=host)
    # (MegEngine's directory: a SHA-1 of owner, name and tag, the files without .git)
    clone = home / "hub" / hashlib.sha1(b"owner_models_v1").hexdigest()[:16]
    assert (clone / "hubconf.py").is_file() and not (clone / ".git").exists()
    shutil.rmtree(hosts)  # cached clone is reused without the server
    assert "tiny" in hub.list("owner/models:v1", git_host=host, use_cache=True)
    # a clone MegEngine made (no tag: its "master") is used as it is
    shutil.copytree(clone, home / "hub" / hashlib.sha1(b"owner_other_master").hexdigest()[:16])
    assert "tiny" in hub.list("owner/other", git_host=host)
    with pytest.raises(GitPullError, match="owner/models.git"):
        hub.list("owner/models:v1", git_host=host, use_cache=False)
    with pytest.raises(InvalidRepo):
        hub.list("not a repo", git_host=host)


def test_http_download_once_into_cache(tmp_path, home):
    import functools
    import http.server

    ref, path = _weights(tmp_path)
    hits = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            hits.append(self.path)
            super().do_GET()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path)))
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/tiny.pkl"
        for _ in range(2):
            state = hub.load_serialized_obj_from_url(url)
            np.testing.assert_array_equal(np.asarray(state["weight"]), ref.weight.numpy())
        assert hits == ["/tiny.pkl"]  # downloaded once, then read from the cache
        with pytest.raises(DownloadError, match="404"):
            hub.load_serialized_obj_from_url(url.replace("tiny", "missing"))
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_pretrained_entry_takes_pretrained_as_its_first_positional_argument(tmp_path, home):
    # MegEngine's wrapper is ``(pretrained=False, **kwargs)``: IBNNet's compare.py calls ``resnet50_ibn_a(True)``
    # and compares the loaded weights; the model function itself gets keywords only
    ref, path = _weights(tmp_path)

    @hub.pretrained(path.as_uri())
    def tiny(pretrained=False, **kwargs):
        return M.Linear(3, 2, **kwargs)

    @hub.pretrained(path.as_uri())
    def tiny_keywords(**kwargs):
        return M.Linear(3, 2, **kwargs)

    for entry in (tiny, tiny_keywords):
        np.testing.assert_array_equal(entry(True).weight.numpy(), ref.weight.numpy())
        assert entry(False).weight.numpy().tolist() != ref.weight.numpy().tolist()
        assert entry(bias=False).bias is None
    with pytest.raises(TypeError):
        tiny_keywords(True, 3)
