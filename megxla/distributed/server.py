"""The key-value store every process of a distributed run talks to: :class:`Server` and :class:`Client`.

MegEngine runs an XML-RPC "py server" for metadata and an "mm server" for NCCL bootstrap. megxla has one
server for both: a threaded TCP server on 127.0.0.1 holding a dict, barriers, and *exchanges* (each rank
deposits a value under a key and receives every rank's value), which is all the host collectives of
:mod:`megxla.functional.distributed` need.

Safety rules kept here:
    * every socket is bound to / connects to the loopback interface only;
    * every blocking operation (connect, get, barrier, exchange, socket reads) has a deadline, so a missing
      peer is reported as a ``TimeoutError`` naming the key and the missing ranks, never a hang;
    * messages are pickles read by an unpickler that only rebuilds plain Python values and NumPy arrays, so
      a message cannot make the server run code.
"""
from __future__ import annotations

import atexit
import io
import ipaddress
import os
import pickle
import socket
import socketserver
import struct
import threading
import time
import weakref

import numpy as np

__all__ = ["Server", "Client"]

_HEADER = struct.Struct("!Q")
# Generous default: a rank may legitimately compute for minutes (evaluation, checkpointing) while its peers
# wait at the next collective. Tests and impatient users set MEGXLA_DIST_TIMEOUT (seconds).
_DEFAULT_TIMEOUT = 600.0


def default_timeout() -> float:
    """Seconds a blocking distributed operation waits for its peers (env ``MEGXLA_DIST_TIMEOUT``, default 600)."""
    value = os.environ.get("MEGXLA_DIST_TIMEOUT")
    if not value:
        return _DEFAULT_TIMEOUT
    try:
        t = float(value)
    except ValueError:
        raise ValueError(f"MEGXLA_DIST_TIMEOUT must be a number of seconds, got {value!r}") from None
    if not t > 0:
        raise ValueError(f"MEGXLA_DIST_TIMEOUT must be positive, got {value!r}")
    return t


def loopback_host(master_ip: str) -> str:
    """``master_ip`` as a loopback address, or a ValueError: the host store serves 127.0.0.1 only."""
    if not isinstance(master_ip, str):
        raise TypeError(f"master_ip must be a str, got {type(master_ip).__name__}")
    if master_ip == "localhost":
        return "127.0.0.1"
    try:
        ok = ipaddress.ip_address(master_ip).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"master_ip {master_ip!r}: megxla's distributed store listens on 127.0.0.1 only "
                         f"(single machine); use 'localhost' or '127.0.0.1'")
    return master_ip


# ---- wire format -----------------------------------------------------------------------------------------------
_SAFE_GLOBALS = {
    ("builtins", n) for n in ("complex", "set", "frozenset", "slice", "range", "bytearray")
} | {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "ml_dtypes":  # bfloat16 & co., the extra float types of JAX
            import ml_dtypes
            obj = getattr(ml_dtypes, name, None)
            if isinstance(obj, type) and issubclass(obj, np.generic):
                return obj
        raise pickle.UnpicklingError(f"distributed store: refusing to load {module}.{name}")


def _dumps(obj) -> bytes:
    return pickle.dumps(obj, protocol=5)


def _loads(data):
    return _SafeUnpickler(io.BytesIO(data)).load()


def _send(sock, obj):
    data = _dumps(obj)
    sock.sendall(_HEADER.pack(len(data)))
    sock.sendall(data)


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:  # bounded: each recv_into either makes progress, hits the socket timeout, or sees EOF
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed by peer")
        got += k
    return bytes(buf)


def _recv(sock, body_timeout=None):
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if body_timeout is None:
        return _loads(_recv_exact(sock, n))
    # The server waits for a client's next request without limit (pooled connections idle between calls),
    # but once a message has started, the rest must arrive in time.
    sock.settimeout(body_timeout)
    try:
        return _loads(_recv_exact(sock, n))
    finally:
        sock.settimeout(None)


# ---- server state ----------------------------------------------------------------------------------------------
class _Store:
    """All server state under one condition variable; every wait has a deadline."""

    def __init__(self, port):
        self.port = port
        self.cond = threading.Condition()
        self.kv = {}
        self.barriers = {}
        self.exchanges = {}
        self.registered = {}
        self.world_size = None
        self.init_error = None
        self.closed = False

    def _wait(self, ready, timeout, describe):
        deadline = time.monotonic() + float(timeout)
        while not ready():
            if self.closed:
                raise ConnectionError("the distributed server is shutting down")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(describe())
            self.cond.wait(min(left, 1.0))

    # -- MegEngine's server methods --
    def get_mm_server_port(self):
        return self.port

    def user_set(self, key, val):
        with self.cond:
            self.kv[key] = val
            self.cond.notify_all()

    def user_get(self, key):
        with self.cond:
            if key not in self.kv:
                raise KeyError(f"distributed store has no key {key!r}")
            return self.kv[key]

    def user_pop(self, key):
        with self.cond:
            if key not in self.kv:
                raise KeyError(f"distributed store has no key {key!r}")
            return self.kv.pop(key)

    def wait_get(self, key, timeout, pop=False):
        with self.cond:
            self._wait(lambda: key in self.kv, timeout, lambda: f"timed out after {timeout:g}s waiting for key {key!r}")
            return self.kv.pop(key) if pop else self.kv[key]

    def group_barrier(self, key, size, timeout):
        with self.cond:
            b = self.barriers.setdefault(key, {"size": size, "count": 0, "gen": 0})
            if b["size"] != size:
                raise ValueError(f"barrier {key!r}: group size {size} does not match {b['size']} of other ranks")
            gen = b["gen"]
            b["count"] += 1
            if b["count"] == size:
                b["count"] = 0
                b["gen"] += 1
                self.cond.notify_all()
                return
            try:
                self._wait(lambda: b["gen"] != gen, timeout,
                           lambda: f"barrier {key!r}: timed out after {timeout:g}s with {b['count']} of {size} "
                                   f"ranks arrived")
            except BaseException:
                b["count"] -= 1  # withdraw, so a later barrier on this key is not miscounted
                raise

    def exchange(self, key, rank, size, value, timeout):
        """Deposit ``value`` as ``rank``'s contribution to ``key``; return all ``size`` contributions."""
        with self.cond:
            e = self.exchanges.get(key)
            if e is None:
                e = self.exchanges[key] = {"size": size, "vals": {}, "read": 0, "error": None}
            if e["error"]:
                raise RuntimeError(e["error"])
            if e["size"] != size:
                raise ValueError(f"collective {key!r}: group size {size} of rank {rank} does not match {e['size']}")
            if not 0 <= rank < size or rank in e["vals"]:
                raise ValueError(f"collective {key!r}: bad or repeated rank {rank} (group size {size})")
            e["vals"][rank] = value
            self.cond.notify_all()
            try:
                self._wait(lambda: len(e["vals"]) == size or e["error"], timeout,
                           lambda: f"collective {key!r}: timed out after {timeout:g}s waiting for group rank(s) "
                                   f"{sorted(set(range(size)) - set(e['vals']))}")
            except TimeoutError as exc:
                e["error"] = str(exc)  # late ranks fail at once instead of waiting for the ones who gave up
                self.cond.notify_all()
                raise
            if e["error"]:
                raise RuntimeError(e["error"])
            out = [e["vals"][r] for r in range(size)]
            e["read"] += 1
            if e["read"] == size:
                del self.exchanges[key]
            return out

    def register(self, rank, world_size, timeout):
        """``init_process_group``'s rendezvous: check world sizes agree and wait for every rank."""
        with self.cond:
            if self.init_error:
                raise RuntimeError(self.init_error)
            if self.world_size is None:
                self.world_size = world_size
            elif world_size != self.world_size:
                self.init_error = (f"init_process_group: world_size mismatch: rank {rank} says {world_size}, "
                                   f"rank(s) {sorted(self.registered)} said {self.world_size}")
                self.cond.notify_all()
                raise ValueError(self.init_error)
            complete = len(self.registered) == self.world_size
            if rank in self.registered and not complete:
                raise ValueError(f"init_process_group: rank {rank} joined twice")
            self.registered[rank] = world_size
            self.cond.notify_all()
            try:
                self._wait(lambda: len(self.registered) == self.world_size or self.init_error, timeout,
                           lambda: f"init_process_group: timed out after {timeout:g}s waiting for rank(s) "
                                   f"{sorted(set(range(self.world_size)) - set(self.registered))} of world_size "
                                   f"{self.world_size}")
            except TimeoutError:
                del self.registered[rank]
                raise
            if self.init_error:
                raise ValueError(self.init_error)

    # -- autodiff bookkeeping of MegEngine's remote send/recv (set once, consumed once) --
    def set_is_grad(self, key, is_grad):
        self.user_set(("is_grad", key), bool(is_grad))

    def check_is_grad(self, key, timeout):
        return self.wait_get(("is_grad", key), timeout, pop=True)

    def set_remote_tracer(self, key, tracer_set):
        self.user_set(("tracer", key), list(tracer_set))

    def check_remote_tracer(self, key, timeout):
        return self.wait_get(("tracer", key), timeout, pop=True)

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()


_METHODS = frozenset({"get_mm_server_port", "user_set", "user_get", "user_pop", "wait_get", "group_barrier",
                      "exchange", "register", "set_is_grad", "check_is_grad", "set_remote_tracer",
                      "check_remote_tracer"})
_ERRORS = {"TimeoutError": TimeoutError, "KeyError": KeyError, "ValueError": ValueError,
           "ConnectionError": ConnectionError, "RuntimeError": RuntimeError, "TypeError": TypeError}


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        store = self.server.store
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.conn_lock:
            self.server.conns.add(sock)
        try:
            while not store.closed:
                try:
                    method, args = _recv(sock, body_timeout=60.0)
                except (ConnectionError, OSError, EOFError):
                    return  # client went away (or the server is closing its sockets)
                except Exception as exc:  # a malformed or refused message: the stream is still in sync
                    _send(sock, ("err", "TypeError", f"bad message: {exc}"))
                    continue
                if method not in _METHODS:
                    reply = ("err", "ValueError", f"unknown distributed store method {method!r}")
                else:
                    try:
                        reply = ("ok", getattr(store, method)(*args))
                    except Exception as exc:  # report to the caller, keep serving
                        name = type(exc).__name__
                        reply = ("err", name if name in _ERRORS else "RuntimeError",
                                 exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc))
                try:
                    _send(sock, reply)
                except OSError:
                    return
        finally:
            with self.server.conn_lock:
                self.server.conns.discard(sock)


class _TCPServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False


class Server:
    r"""The distributed key-value server; the master process starts one (``launcher`` does it for you).

    It listens on ``127.0.0.1`` in a background thread of the creating process and serves the
    :class:`Client` of every rank: user keys, barriers, broadcasts of Python values and the host
    exchanges under megxla's collectives.

    Args:
        port: TCP port; 0 picks a free one (read it back from :attr:`py_server_port`).

    Attributes:
        py_server_port: the port clients connect to.
        mm_server_port: the same port (MegEngine's separate NCCL bootstrap server is not needed).

    Example:
        >>> from megxla.distributed import Server, Client
        >>> server = Server(0)
        >>> client = Client("localhost", server.py_server_port)
        >>> client.user_set("answer", 42); client.user_get("answer")
        42
        >>> client.close(); server.shutdown()
    """

    def __init__(self, port=0):
        port = int(port)
        if not 0 <= port < 65536:
            raise ValueError(f"Server: port must be in [0, 65535], got {port}")
        self._srv = _TCPServer(("127.0.0.1", port), _Handler)
        self.py_server_port = self._srv.server_address[1]
        self.mm_server_port = self.py_server_port
        self._srv.store = _Store(self.py_server_port)
        self._srv.conns = set()
        self._srv.conn_lock = threading.Lock()
        self._thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"megxla-dist-server:{self.py_server_port}", daemon=True)
        self._thread.start()
        _live_servers.add(self)

    def shutdown(self):
        r"""Stop serving: waiting clients get a ``ConnectionError``, open connections are closed.

        Example:
            >>> Server(0).shutdown()
        """
        if self._srv is None:
            return
        srv, self._srv = self._srv, None
        srv.store.close()
        srv.shutdown()
        with srv.conn_lock:
            conns = list(srv.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        srv.server_close()
        self._thread.join(timeout=5)



# Servers still running at exit are stopped while their threads are alive (atexit runs before the
# interpreter freezes daemon threads; stopping one later would wait forever for its serve loop).
_live_servers = weakref.WeakSet()


@atexit.register
def _stop_servers():
    for s in list(_live_servers):
        try:
            s.shutdown()
        except Exception:  # best effort at exit
            pass


class Client:
    r"""A connection to the distributed :class:`Server` (one per process; ``get_client()`` returns it).

    Thread-safe: each concurrent call uses its own pooled socket, so host collectives running on XLA's
    callback thread do not wait for a call made on the main thread.

    Args:
        master_ip: the server's address, a loopback address (``"localhost"`` or ``"127.0.0.1"``).
        port: the server's port.
        timeout: seconds any blocking call waits; default ``MEGXLA_DIST_TIMEOUT`` or 600.

    Example:
        >>> server = Server(0)
        >>> client = Client("localhost", server.py_server_port)
        >>> client.bcast_val("hello", "greeting", 1)
        'hello'
        >>> client.close(); server.shutdown()
    """

    def __init__(self, master_ip, port, timeout=None):
        self.master_ip = master_ip
        self._host = loopback_host(master_ip)
        self.port = int(port)
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self._idle = []
        self._lock = threading.Lock()
        self.bcast_dict = {}
        self.connect()

    def _open(self):
        # Waits for the server (rank 0 may still be starting it) until the deadline.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                sock = socket.create_connection((self._host, self.port), timeout=min(self.timeout, 10.0))
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"could not connect to the distributed server at {self._host}:{self.port} "
                                       f"within {self.timeout:g}s: {exc}") from None
                time.sleep(0.05)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Server-side waits end at `timeout` with a precise message; the socket gives up a bit later.
        sock.settimeout(self.timeout + 15.0)
        return sock

    def connect(self):
        r"""Open a connection to the server, retrying until it answers or the timeout passes.

        Returns:
            self.
        """
        sock = self._open()
        with self._lock:
            self._idle.append(sock)
        return self

    def _call(self, method, *args):
        with self._lock:
            sock = self._idle.pop() if self._idle else None
        if sock is None:
            sock = self._open()
        try:
            _send(sock, (method, args))
            reply = _recv(sock)
        except (OSError, EOFError) as exc:
            sock.close()
            if isinstance(exc, socket.timeout):
                raise TimeoutError(f"distributed server {self._host}:{self.port} did not answer {method} "
                                   f"within {self.timeout:g}s") from None
            raise ConnectionError(f"lost the distributed server {self._host}:{self.port} during {method}: "
                                  f"{exc}") from None
        with self._lock:
            self._idle.append(sock)
        if reply[0] == "ok":
            return reply[1]
        raise _ERRORS.get(reply[1], RuntimeError)(reply[2])

    def close(self):
        r"""Close the pooled connections (the server keeps its state)."""
        with self._lock:
            socks, self._idle = self._idle, []
        for s in socks:
            s.close()

    def get_mm_server_port(self):
        r"""The port of the collective-communication server (the same server in megxla).

        Returns:
            an int.
        """
        return self._call("get_mm_server_port")

    def user_set(self, key, val):
        r"""Store ``val`` (plain Python values and NumPy arrays) under ``key``.

        Args:
            key: a str.
            val: the value.
        """
        return self._call("user_set", key, val)

    def user_get(self, key):
        r"""The value stored under ``key``; ``KeyError`` if there is none.

        Args:
            key: a str.

        Returns:
            the value.
        """
        return self._call("user_get", key)

    def user_pop(self, key):
        r"""Remove ``key`` and return its value; ``KeyError`` if there is none.

        Args:
            key: a str.

        Returns:
            the value.
        """
        return self._call("user_pop", key)

    def group_barrier(self, key, size):
        r"""Block until ``size`` processes called ``group_barrier`` with this ``key`` (or time out).

        Args:
            key: the barrier's name, the same in every participant.
            size: number of participants.
        """
        return self._call("group_barrier", key, int(size), self.timeout)

    def bcast_val(self, val, key, size):
        r"""Broadcast a Python value: the one process passing a non-None ``val`` sends it to ``size - 1`` others.

        Args:
            val: the value on the sender, None on the receivers.
            key: the broadcast's name, the same in every participant.
            size: number of participants.

        Returns:
            the sender's value, in every participant.
        """
        if val is not None:
            self.user_set(key + "_sync", val)
            self.group_barrier(key, size)
            self.group_barrier(key, size)  # everyone has read it: free the slot
            self.user_pop(key + "_sync")
            return val
        self.group_barrier(key, size)
        val = self.user_get(key + "_sync")
        self.group_barrier(key, size)
        return val

    def set_is_grad(self, key, is_grad):
        r"""Publish whether the tensor of a remote send under ``key`` needs a gradient.

        Args:
            key: the send/recv pair's key.
            is_grad: a bool.
        """
        return self._call("set_is_grad", key, bool(is_grad))

    def check_is_grad(self, key):
        r"""Wait for and consume the flag published by :meth:`set_is_grad`.

        Args:
            key: the send/recv pair's key.

        Returns:
            the bool.
        """
        return self._call("check_is_grad", key, self.timeout)

    def set_remote_tracer(self, key, tracer_set):
        r"""Publish a set of tracer ids (autodiff bookkeeping of remote send/recv).

        Args:
            key: the send/recv pair's key.
            tracer_set: an iterable of ints.
        """
        return self._call("set_remote_tracer", key, list(tracer_set))

    def check_remote_tracer(self, key):
        r"""Wait for and consume what :meth:`set_remote_tracer` published.

        Args:
            key: the send/recv pair's key.

        Returns:
            a list of ints.
        """
        return self._call("check_remote_tracer", key, self.timeout)

    # -- megxla's host collectives --
    def _exchange(self, key, rank, size, value):
        return self._call("exchange", key, int(rank), int(size), value, self.timeout)

    def _wait_pop(self, key):
        return self._call("wait_get", key, self.timeout, True)

    def _register(self, rank, world_size):
        return self._call("register", int(rank), int(world_size), self.timeout)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
