"""A pod's network namespace, made and entered from Python threads (as root).

Each pod gets a namespace of its own holding only loopback, up, with the pod's IPs and the
`kubernetes` Service's cluster IP as /32 (/128) addresses on it, so two guard replicas both
bind `:8080` without colliding and a probe reaches a pod at its `podIP` as the kubelet's does.
Python 3.11 has neither `os.unshare` nor `os.setns`: they are called through ctypes on a
short-lived thread of their own (namespaces are per thread), which enters the namespace, runs
one function there and leaves: a socket made there stays in the pod's namespace (listening in
it, or connecting from it) whatever thread uses it later. The namespace lives as long as the
file descriptor kept here (and any process or socket in it); containers join it with
`nsenter --net=/proc/self/fd/N`.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
SIOCSIFFLAGS = 0x8914
SIOCSIFADDR = 0x8916
SIOCSIFNETMASK = 0x891C
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
_THREAD_NS = "/proc/thread-self/ns/net"

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _on_thread(target: int | None, fn: Callable[[], T]) -> T:
    """Run `fn` on a fresh thread inside namespace fd `target` (None: a new namespace)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        home = os.open(_THREAD_NS, os.O_RDONLY)
        try:
            if target is None:
                _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
            else:
                _check(_libc.setns(target, CLONE_NEWNET), "setns(CLONE_NEWNET)")
            try:
                result.append(fn())
            finally:
                _check(_libc.setns(home, CLONE_NEWNET), "setns back")
        except BaseException as err:  # handed to the caller's thread
            failure.append(err)
        finally:
            os.close(home)

    thread = threading.Thread(target=run, name="sim-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _ifreq(name: str, payload: bytes) -> bytes:
    return struct.pack("16s", name.encode()) + payload


def _sockaddr_in(ip: str) -> bytes:
    return struct.pack("HH4s8x", socket.AF_INET, 0, socket.inet_aton(ip))


def _configure(addresses: Sequence[str]) -> None:
    """In the new namespace: loopback up, each address on it as a host route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS,
                    struct.pack("16sh14x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
        v4 = [a for a in addresses if ":" not in a]
        for n, ip in enumerate(v4):
            label = f"lo:{n}"
            fcntl.ioctl(s.fileno(), SIOCSIFADDR, _ifreq(label, _sockaddr_in(ip)))
            fcntl.ioctl(s.fileno(), SIOCSIFNETMASK, _ifreq(label, _sockaddr_in("255.255.255.255")))
    v6 = [a for a in addresses if ":" in a]
    if v6:
        index = socket.if_nametoindex("lo")
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s6:
            for ip in v6:  # struct in6_ifreq: address, prefix length, interface index
                fcntl.ioctl(s6.fileno(), SIOCSIFADDR,
                            struct.pack("16sIi", socket.inet_pton(socket.AF_INET6, ip), 128,
                                        index))


class PodNetwork:
    """One pod's network namespace (see the module docstring); `close` lets it go."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self.addresses = tuple(addresses)

        def make() -> int:
            _configure(self.addresses)
            return os.open(_THREAD_NS, os.O_RDONLY | os.O_CLOEXEC)

        self.fd: int | None = _on_thread(None, make)

    def run(self, fn: Callable[[], T]) -> T:
        """`fn()` on a thread inside this namespace."""
        if self.fd is None:
            raise OSError("the pod's network namespace is gone")
        return _on_thread(self.fd, fn)

    def listen(self, host: str, port: int) -> socket.socket:
        """A listening TCP socket on host:port inside the namespace."""

        def make() -> socket.socket:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
            return sock

        return self.run(make)

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection from inside the namespace (a probe's)."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = self.run(lambda: socket.socket(family, socket.SOCK_STREAM))
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return sock

    def nsenter_args(self) -> list[str]:
        """The command prefix that runs a process in this namespace (pass `fd` to it)."""
        return ["nsenter", f"--net=/proc/self/fd/{self.fd}"]

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
