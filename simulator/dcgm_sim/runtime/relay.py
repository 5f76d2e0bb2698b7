"""The `kubernetes` Service inside a pod: a TCP relay from the pod's network namespace to the
sim's HTTPS listener.

A real pod reaches the API server at the `kubernetes` Service's cluster IP (10.96.0.1:443,
`KUBERNETES_SERVICE_HOST/PORT`) through kube-proxy's rules. Here the pod's namespace holds only
loopback, so the runtime listens on that address inside it (`PodNetwork.listen`) and this relay
copies bytes to the sim's listener on the host's loopback: TLS passes through untouched, so the
official client's in-cluster configuration verifies the sim's certificate (valid for the cluster
IP, `tls`) with the service account's `ca.crt`, as it would a real API server. A thread accepts,
two threads per connection copy (a watch is a long-lived connection; a pod holds a few).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Relay:
    def __init__(self, listener: socket.socket, upstream: tuple[str, int], name: str) -> None:
        self.listener = listener
        self.upstream = upstream
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"sim-relay-{name}",
                                        daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                outside = socket.create_connection(self.upstream, timeout=10)
                outside.settimeout(None)
            except OSError:
                inside.close()
                continue
            with self._lock:
                if self._closed:
                    inside.close()
                    outside.close()
                    return
                self._open.update((inside, outside))
            done = threading.Semaphore(0)  # the second copier to finish closes both ends
            for src, dst in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._copy, args=(src, dst, done), daemon=True,
                                 name="sim-relay-copy").start()

    def _copy(self, src: socket.socket, dst: socket.socket, done: threading.Semaphore) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with self._lock:
            if done.acquire(blocking=False):
                self._open.difference_update((src, dst))
                src.close()
                dst.close()
            else:
                done.release()

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        with self._lock:
            self._closed = True
            sockets = list(self._open)
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
