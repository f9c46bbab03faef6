"""Host side of the fork-server protocol, and Docker's attach-stream framing.

A container started with stdin open and no TTY speaks to us through one socket:
we write raw bytes to its stdin; its stdout and stderr come back multiplexed, each
chunk behind an 8-byte header (stream id, 3 zero bytes, big-endian length).
Inside the stdout stream the server sends length-prefixed JSON frames.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import time
from typing import Optional

from .errors import InfraError

try:
    from docker.transport.sshconn import SSHSocket
except ImportError:   # the SDK's ssh:// support needs paramiko (docker[ssh]); without it no SSHSocket exists
    SSHSocket = None

STDOUT, STDERR = 1, 2
MAX_FRAME = 256 << 20   # sanity bound: the server caps what each step ships back


def encode_frame(message: dict) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">I", len(body)) + body


class FrameDecoder:
    """Incremental decoder: feed Docker-multiplexed bytes, get server messages out."""

    def __init__(self) -> None:
        self._raw = bytearray()      # multiplexed bytes not yet split into chunks
        self._stdout = bytearray()   # the server's stdout, not yet split into frames
        self.stderr_tail = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self._raw += data
        while len(self._raw) >= 8:
            stream, length = self._raw[0], struct.unpack(">I", self._raw[4:8])[0]
            if stream not in (0, STDOUT, STDERR) or self._raw[1:4] != b"\0\0\0":
                raise InfraError(f"corrupt attach stream header {bytes(self._raw[:8])!r}")
            if len(self._raw) < 8 + length:
                break
            payload = bytes(self._raw[8:8 + length])
            del self._raw[:8 + length]
            if stream == STDERR:
                # Kept for diagnostics: a crashing server prints its traceback there.
                self.stderr_tail += payload
                del self.stderr_tail[:-8192]
            else:
                self._stdout += payload
        return self._frames()

    def _frames(self) -> list[dict]:
        out = []
        while len(self._stdout) >= 4:
            (length,) = struct.unpack(">I", self._stdout[:4])
            if length > MAX_FRAME:
                raise InfraError(f"server frame of {length} bytes exceeds {MAX_FRAME}: protocol out of sync")
            if len(self._stdout) < 4 + length:
                break
            body = bytes(self._stdout[4:4 + length])
            del self._stdout[:4 + length]
            try:
                message = json.loads(body)
            except ValueError as exc:
                raise InfraError(f"server sent a frame that is not JSON: {exc}") from None
            if not isinstance(message, dict) or "type" not in message:
                raise InfraError(f"server sent a frame without a type: {body[:100]!r}")
            out.append(message)
        return out


class Channel:
    """A blocking request/response link over an attach socket."""

    def __init__(self, sock: "socket.socket | SSHPipe") -> None:
        self.sock = sock
        self.decoder = FrameDecoder()
        self._pending: list[dict] = []

    def send(self, message: dict) -> None:
        try:
            self.sock.settimeout(30)
            self.sock.sendall(encode_frame(message))
        except OSError as exc:
            raise InfraError(f"cannot write to the sandbox server: {exc}") from None

    def receive(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while not self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InfraError(f"sandbox server sent no reply within {timeout_s:.1f} s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError as exc:
                raise InfraError(f"lost the sandbox server: {exc}") from None
            if not data:
                tail = self.decoder.stderr_tail.decode(errors="replace").strip()
                raise InfraError("sandbox server closed its output (container stopped)"
                                 + (f"; its last words: {tail[-500:]}" if tail else ""))
            self._pending.extend(self.decoder.feed(data))
        return self._pending.pop(0)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class SSHPipe:
    """The attach stream of an ``ssh://`` engine, which the docker SDK hands back as an ``SSHSocket``.

    That object wraps the ``ssh`` client's pipes: its ``recv(n)`` blocks until n bytes
    arrive and ``settimeout`` does nothing, so a reply shorter than the read size would
    never be seen. This reads the client's stdout fd directly, with the Channel's timeouts.
    """

    def __init__(self, ssh_socket: "SSHSocket") -> None:
        self._proc = ssh_socket.proc
        self._fd = self._proc.stdout.fileno()
        os.set_blocking(self._fd, False)
        # Whatever the HTTP upgrade already read past its headers, first.
        self._early = self._proc.stdout.read1(1 << 20) or b""
        self._timeout: Optional[float] = None

    def settimeout(self, timeout: Optional[float]) -> None:
        self._timeout = timeout

    def recv(self, n: int) -> bytes:
        if self._early:
            data, self._early = self._early[:n], self._early[n:]
            return data
        ready, _, _ = select.select([self._fd], [], [], self._timeout)
        if not ready:
            raise socket.timeout("timed out")
        try:
            return os.read(self._fd, n)
        except BlockingIOError:
            return self.recv(n)

    def sendall(self, data: bytes) -> None:
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def close(self) -> None:
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def raw_socket(attach_result: object) -> "socket.socket | SSHPipe":
    """The docker SDK returns a SocketIO (unix), a socket (tcp) or an SSHSocket (ssh://)."""
    if SSHSocket is not None and isinstance(attach_result, SSHSocket):
        return SSHPipe(attach_result)
    sock: Optional[socket.socket] = getattr(attach_result, "_sock", None)
    if sock is None and isinstance(attach_result, socket.socket):
        sock = attach_result
    if sock is None:
        raise InfraError(f"unsupported attach transport {type(attach_result).__name__}; "
                         "use a unix://, ssh:// or tcp:// Docker host")
    return sock
