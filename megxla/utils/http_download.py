"""``megengine.utils.http_download`` (thin: MegEngine's module path): :func:`download_from_url` is the hub's
downloader (timeouts, an error naming the URL, an atomic rename into place).

Example:
    >>> import os, tempfile, pathlib
    >>> src = pathlib.Path(tempfile.mkdtemp(), "w.bin"); _ = src.write_bytes(b"abc")
    >>> dst = os.path.join(tempfile.mkdtemp(), "copy.bin")
    >>> download_from_url(src.as_uri(), dst), open(dst, "rb").read()
    ('900150983cd24fb0d6963f7d28e17f72', b'abc')
"""
from ..hub.exceptions import DownloadError as HTTPDownloadError
from ..hub.fetcher import download_from_url

__all__ = ["download_from_url", "HTTPDownloadError"]
