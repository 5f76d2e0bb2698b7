"""A fork server for CLI subprocesses: `python -m migrator ...` without paying its start-up.

Every CLI subprocess the tests start spends ~0.2 CPU-s starting the interpreter and ~0.5 CPU-s
importing typer, rich and the migrator modules before it does anything; the crash-anywhere
tests start two per crash point. Here one helper process per pytest worker (started on first
use, never a fork of the worker, whose sim threads a fork would copy half-way) imports them once
and forks a child per request. The child is a real process with its own pid, start time and
stdio (passed with SCM_RIGHTS), its own environment, cwd and argv; it runs the module the way
`python -m` does (`runpy._run_module_as_main`) and then falls off the end of the interpreter,
so exit codes, uncaught exceptions, atexit handlers, non-daemon threads and stdio flushing are
the interpreter's own.

What a child cannot get from a fork: anything decided at interpreter start or at import. So
the server records every environment variable its imports read (and the interpreter's own:
PYTHON*, locale, TZ, HOME), and a request whose environment differs on any of them runs as a
plain subprocess instead. The hash seed is the server's for all its children.

The test side gets `Forked`, a `subprocess.Popen` whose child came from the server: `poll`,
`wait`, `communicate`, `send_signal` and `returncode` are Popen's (a signal death reads as
-signum). The server does not reap a child before the test side has read its status, so a pid
is never signalled after it could have been reused, as with Popen.

`DCGM_TEST_FORKSERVER=0` turns it off (every run a plain `python -m migrator`)."""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import runpy
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SWITCH = "DCGM_TEST_FORKSERVER"
REPO = Path(__file__).resolve().parents[2]
MODULE = "migrator"
# What the CLI imports on its way to a cluster command: imported once, in the server.
PRELOAD = (
    "typer", "typer.testing", "rich.console", "rich.table",
    "yaml", "urllib3", "migrator", "migrator.cli.app", "migrator.commands",
    "migrator.cli.render", "migrator.cli.live", "migrator.cli.options",
    "migrator.kube.client", "migrator.engine.applying",
    "migrator.engine.reports", "migrator.engine.progress", "migrator.plans",
    "typer._click.decorators", "importlib.resources.readers",
    "encodings.idna", "pwd", "_strptime",
)
STARTUP_PREFIXES = ("PYTHON", "LC_")  # read by the interpreter before any import
STARTUP_KEYS = ("LANG", "LANGUAGE", "TZ", "HOME")
MAX_MESSAGE = 1 << 20
LOG = Path(tempfile.gettempdir()) / "dcgm-migrate-forkserver.log"
START_TIMEOUT = 120.0


# ---- the server ------------------------------------------------------------------------------

class _Recording(os._Environ[str]):
    """os.environ while the server imports: notes which variables an import reads."""

    read: dict[str, str | None] = {}

    def __getitem__(self, key: str) -> str:
        try:
            value: str = super().__getitem__(key)
        except KeyError:
            _Recording.read.setdefault(key, None)
            raise
        _Recording.read.setdefault(key, value)
        return value


def _preload() -> dict[str, str | None]:
    """Import PRELOAD; the environment variables those imports read, with their values."""
    environ_class = type(os.environ)
    os.environ.__class__ = _Recording
    try:
        for name in PRELOAD:
            __import__(name)
    finally:
        os.environ.__class__ = environ_class
    return dict(_Recording.read)


@dataclass
class _Child:
    pid: int
    channel: socket.socket
    pidfd: int | None
    status: int | None = None  # the returncode, once known
    released: bool = False  # the test side read the status, or let go of the child


@dataclass
class _Request:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]


@dataclass
class _Server:
    control: socket.socket
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    children: dict[int, _Child] = field(default_factory=dict)

    def serve(self) -> _Request:
        """The loop; returns only in a forked child, with the request it is to run."""
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        while True:
            for key, _ in self.selector.select():
                request = self._handle(key.data)
                if request is not None:
                    return request

    def _handle(self, what: Any) -> _Request | None:
        if what == "control":
            return self._request()
        kind, pid = what
        child = self.children.get(pid)
        if child is None:
            return None
        if kind == "exited":
            self._exited(child)
        else:
            self._release(child)
        return None

    def _request(self) -> _Request | None:
        message, fds, _, _ = socket.recv_fds(self.control, MAX_MESSAGE, 4)
        if not message:
            self._shutdown()
        body = json.loads(message)
        request = _Request(body["argv"], body["env"], body["cwd"], fds[:3])
        channel = socket.socket(fileno=fds[3])
        pid = self._fork()
        if pid == 0:
            channel.close()
            return request
        for fd in request.fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)  # readable once the child has exited
        self.children[pid] = _Child(pid, channel, pidfd)
        self.selector.register(pidfd, selectors.EVENT_READ, ("exited", pid))
        self.selector.register(channel, selectors.EVENT_READ, ("ack", pid))
        channel.sendall(f"pid {pid}\n".encode())
        return None

    def _fork(self) -> int:
        """Fork, leaving the child none of the server's descriptors."""
        assert threading.active_count() == 1, "the fork server must have no threads"
        pid = os.fork()
        if pid == 0:
            self.selector.close()
            self.control.close()
            for child in self.children.values():
                child.channel.close()
                if child.pidfd is not None:
                    os.close(child.pidfd)
        return pid

    def _exited(self, child: _Child) -> None:
        """Tell the test side how the child ended; it stays a zombie until acknowledged."""
        assert child.pidfd is not None
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        child.pidfd = None
        info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert info is not None
        killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        child.status = -info.si_status if killed else info.si_status
        if child.released:
            self._reap(child)
            return
        try:
            child.channel.sendall(f"exit {child.status} {cpu_seconds(child.pid)}\n".encode())
        except OSError:  # the test side let go of it: nobody will read it
            self._release(child)

    def _release(self, child: _Child) -> None:
        """The test side closed its end (it read the status, or let go of the child): reap
        the child once it has ended."""
        self.selector.unregister(child.channel)
        child.channel.close()
        child.released = True
        if child.status is not None:
            self._reap(child)

    def _reap(self, child: _Child) -> None:
        os.waitpid(child.pid, 0)
        self.children.pop(child.pid, None)

    def _shutdown(self) -> None:
        """The test side is gone: end what still runs, and exit."""
        for child in list(self.children.values()):
            if child.status is None:
                os.kill(child.pid, 9)
            os.waitpid(child.pid, 0)
        os._exit(0)


def cpu_seconds(pid: int | str = "self", waited: bool = True) -> float:
    """CPU seconds of a process (a zombie's too: final), with those of the children it
    waited for when `waited`; 0 when it cannot be read."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    ticks = [int(f) for f in text.rsplit(")", 1)[1].split()[11:15]]  # utime stime cutime cstime
    return sum(ticks if waited else ticks[:2]) / os.sysconf("SC_CLK_TCK")


def _stream(fd: int, template: io.TextIOWrapper, mode: str) -> io.TextIOWrapper:
    """A std stream on `fd` made as the interpreter makes one at start: the server's encoding,
    errors and (un)buffering, which the same environment decided; line buffered on a terminal
    and for stderr (pylifecycle.c, create_stdio)."""
    unbuffered = template.write_through
    buffering = 0 if unbuffered and mode == "w" else -1
    binary = io.open(fd, mode + "b", buffering, closefd=False)  # noqa: SIM115, UP020
    text = io.TextIOWrapper(binary, encoding=template.encoding, errors=template.errors,
                            newline="\n", line_buffering=not unbuffered and (
                                os.isatty(fd) or fd == 2),
                            write_through=unbuffered)
    text.mode = mode  # type: ignore[misc]
    return text


def _become(request: _Request) -> str:
    """In the child: take the request's stdio, environment, cwd and argv; the module to run."""
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        stream = _stream(fd, getattr(sys, f"__{name}__"), mode)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    os.environ.clear()  # in place: modules keep a reference to os.environ (rich's Console)
    os.environ.update(request.env)
    os.chdir(request.cwd)
    module = request.argv[2]
    sys.orig_argv = list(request.argv)
    sys.argv = ["-m", *request.argv[3:]]  # runpy puts the module's path first, as -m does
    sys.path[0] = os.getcwd()  # -m's first path entry: the cwd, in full
    sys.modules["__main__"] = types.ModuleType("__main__")
    return module


def main() -> None:
    """The server process (`python -c 'from tests.helpers.forkserver import main; main()' FD`):
    import, say ready, serve; in a child, run the requested module as `python -m` would."""
    control = socket.socket(fileno=int(sys.argv[1]))
    reads = _preload()
    gc.collect()
    gc.freeze()  # the preloaded heap stays shared with every child, out of its collections
    control.send(json.dumps({"ready": os.getpid(), "reads": reads}).encode())
    request = _Server(control).serve()
    module = _become(request)
    runpy._run_module_as_main(module)  # type: ignore[attr-defined]  # what `python -m` calls


# ---- the test side ---------------------------------------------------------------------------

def startup_keys(env: Mapping[str, str]) -> set[str]:
    """The variables of `env` the interpreter reads at start, before any import."""
    return {k for k in env if k.startswith(STARTUP_PREFIXES) or k in STARTUP_KEYS}


@dataclass
class Server:
    """The test side of one fork server: its process, its control socket, and what a
    request's environment must agree with."""

    process: subprocess.Popen[bytes]
    control: socket.socket
    env: dict[str, str]
    reads: dict[str, str | None]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serves(self, argv: list[str], env: Mapping[str, str]) -> bool:
        """Whether a child of this server is the same as `argv` started afresh with `env`."""
        if argv[:3] != [sys.executable, "-m", MODULE] or self.process.poll() is not None:
            return False
        keys = set(self.reads) | startup_keys(env) | startup_keys(self.env)
        return all(env.get(k) == self.env.get(k) for k in keys)

    def fork(self, argv: list[str], cwd: str, env: Mapping[str, str], fds: list[int]
             ) -> tuple[int, socket.socket]:
        """A child running `argv` on the given stdin, stdout and stderr: its pid and the
        channel on which its exit status will come."""
        ours, theirs = socket.socketpair()
        body = json.dumps({"argv": argv, "env": dict(env), "cwd": cwd}).encode()
        try:
            with self.lock:
                socket.send_fds(self.control, [body], [*fds, theirs.fileno()])
        finally:
            theirs.close()
        ours.settimeout(START_TIMEOUT)
        line = _read_line(ours, bytearray())
        assert line is not None and line.startswith("pid "), f"fork server: {line!r} (see {LOG})"
        ours.settimeout(None)
        return int(line.split()[1]), ours

    def close(self) -> None:
        self.control.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _read_line(sock: socket.socket, buffer: bytearray) -> str | None:
    """The next line from `sock` (None at its end), `buffer` holding what came after it."""
    while b"\n" not in buffer:
        part = sock.recv(4096)
        if not part:
            return None
        buffer += part
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode()


def start_server(env: Mapping[str, str]) -> Server:
    """A fork server with `env` (the one a plain CLI subprocess would get), once it has
    imported PRELOAD."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    code = "from tests.helpers.forkserver import main; main()"
    with LOG.open("ab") as log:  # its own errors (a child's stderr is the child's)
        process = subprocess.Popen([sys.executable, "-c", code, str(theirs.fileno())],
                                   cwd=REPO, env=dict(env), pass_fds=(theirs.fileno(),),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=log)
    theirs.close()
    ours.settimeout(START_TIMEOUT)
    try:
        hello = ours.recv(MAX_MESSAGE)
    except TimeoutError:
        hello = b""
    if not hello:
        process.kill()
        raise RuntimeError(f"the fork server did not start (exit {process.wait()}; see {LOG})")
    ours.settimeout(None)
    return Server(process, ours, dict(env), json.loads(hello)["reads"])


_servers: dict[int, Server] = {}  # per process (a fork of a worker must not share it)
_forked_cpu = [0.0]  # CPU seconds of the children whose status this process read
_stopped_cpu = [0.0]  # CPU seconds of this process's servers already gone


def children_cpu() -> float:
    """CPU seconds the fork servers of this process spent for it: their own, and their
    children's as each one's status came (what RUSAGE_CHILDREN cannot see: the children
    are the server's)."""
    mine = _servers.get(os.getpid())
    own = cpu_seconds(mine.process.pid, waited=False) if mine is not None else 0.0
    return own + _forked_cpu[0] + _stopped_cpu[0]



def server(env: Mapping[str, str]) -> Server | None:
    """This process's fork server (started on first use with `env`), None when turned off."""
    if os.environ.get(SWITCH, "1") == "0":
        return None
    current = _servers.get(os.getpid())
    if current is None or current.process.poll() is not None:
        if current is not None:
            _stopped_cpu[0] += cpu_seconds(current.process.pid, waited=False)
        if not _servers:
            atexit.register(_stop_servers)
        current = _servers[os.getpid()] = start_server(env)
    return current


def _stop_servers() -> None:
    mine = _servers.pop(os.getpid(), None)
    if mine is not None:
        mine.close()


class Forked(subprocess.Popen[str]):
    """`subprocess.Popen(argv, stdin=DEVNULL, stdout=PIPE, stderr=PIPE, text=True)` whose
    child a fork server made: only how the child starts and how its status comes differ."""

    def __init__(self, fork_server: Server, argv: list[str], cwd: str,
                 env: Mapping[str, str]) -> None:
        self._server = fork_server
        self._channel: socket.socket | None = None
        self._pending = bytearray()
        super().__init__(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any,
                       pass_fds: Any, cwd: Any, env: Any, startupinfo: Any,
                       creationflags: Any, shell: Any, p2cread: int, p2cwrite: int,
                       c2pread: int, c2pwrite: int, errread: int, errwrite: int,
                       *rest: Any) -> None:
        self.pid, self._channel = self._server.fork(list(args), str(cwd), env,
                                                    [p2cread, c2pwrite, errwrite])
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite,  # type: ignore[attr-defined]
                             errread, errwrite)

    def _status(self, timeout: float | None) -> int | None:
        """The exit status, once the server sent it (acknowledged: now it may reap)."""
        if self.returncode is not None or self._channel is None:
            return self.returncode
        self._channel.settimeout(timeout)
        try:
            line = _read_line(self._channel, self._pending)
        except (TimeoutError, BlockingIOError):
            return None
        assert line is not None and line.startswith("exit "), f"fork server: {line!r} (see {LOG})"
        _, code, cpu = line.split()
        _forked_cpu[0] += float(cpu)
        self.returncode = int(code)
        self._channel.close()
        self._channel = None
        return self.returncode

    def _internal_poll(self, _deadstate: Any = None, **_: Any) -> int | None:
        return self._status(0)

    def _wait(self, timeout: float | None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code


def popen(argv: list[str], cwd: str | Path, env: Mapping[str, str],
          base: Mapping[str, str]) -> subprocess.Popen[str]:
    """`argv` with stdin from /dev/null and stdout, stderr piped (text): forked by this
    process's fork server (started with `base`, the usual environment) when a child of it
    can stand for a fresh interpreter, else a plain Popen."""
    forks = server(base)
    if forks is not None and forks.serves(argv, env):
        return Forked(forks, argv, str(cwd), env)
    return subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run(argv: list[str], cwd: str | Path, env: Mapping[str, str], base: Mapping[str, str],
        timeout: float) -> tuple[int, str, str]:
    """`subprocess.run(argv, ..., capture_output=True, text=True, timeout=timeout)`: code,
    stdout, stderr; killed and TimeoutExpired when it outlives `timeout`."""
    with popen(argv, cwd, env, base) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return proc.returncode if proc.returncode is not None else proc.wait(), out, err
