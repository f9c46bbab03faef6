"""The wire between the tests (the judge) and the program: framed JSON messages and the values they carry.

Stdlib only: copied into the images beside the fork server.

What travels is data, never code and never objects: plain values (None, bool, int,
float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset, Fraction,
Decimal, naive date/time/datetime, timedelta) as their base type, and anything else as
a handle that names an object on the side that owns it (pyrpc.py makes and serves
handles). Wire: 4-byte big-endian length + ASCII JSON of one message.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import fractions
import json
import os
import struct
from typing import Protocol

MAX_MESSAGE = 64 << 20
MAX_DEPTH = 200                 # nesting of containers inside one value (well inside the recursion limit)
_BIG = 1 << 62                  # ints at least this large travel as hex: decimal text is quadratic


class PeerGone(BaseException):
    """The other process ended (or broke the protocol) while a call was open."""


class ProtocolError(Exception):
    """A message that this protocol never sends (the other side is broken or hostile)."""


class Owner(Protocol):
    """What a codec asks of the side it works for: its handles, and the other side's."""

    def export(self, obj: object) -> int: ...
    def exported_object(self, rid: int) -> object: ...
    def remote(self, rid: int, type_name: str) -> object: ...
    def own_handle(self, obj: object) -> int | None: ...


# --------------------------------------------------------------------------- the wire

def frame(message: dict) -> bytes:
    """One message as it travels: its length (4 bytes, big-endian), then its ASCII JSON."""
    body = json.dumps(message, separators=(",", ":")).encode("ascii")
    return struct.pack(">I", len(body)) + body


class Channel:
    """Length-prefixed JSON messages over one connected socket fd."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, message: dict) -> None:
        data = memoryview(frame(message))
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError as exc:
            raise PeerGone(f"cannot write to the other process: {exc}") from None

    def recv(self) -> dict:
        (length,) = struct.unpack(">I", self._exact(4))
        if length > MAX_MESSAGE:
            raise PeerGone(f"the other process sent a message of {length} bytes (at most {MAX_MESSAGE})")
        try:
            message = json.loads(self._exact(length))
        except (ValueError, RecursionError) as exc:
            raise PeerGone(f"the other process sent a malformed message: {exc}") from None
        if type(message) is not dict:
            raise PeerGone("the other process sent a message that is not an object")
        return message

    def _exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            try:
                chunk = os.read(self.fd, min(n - got, 1 << 20))
            except OSError as exc:
                raise PeerGone(f"lost the other process: {exc}") from None
            if not chunk:
                raise PeerGone("the other process closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


# --------------------------------------------------------------------------- values

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Codec:
    """Values to JSON and back; objects that are not data become handles of `peer`."""

    def __init__(self, peer: Owner | None) -> None:
        self.peer = peer   # None: data only (a literal plan), no handle ever made

    def encode(self, x: object, depth: int = 0, path: set | None = None) -> object:
        t = type(x)
        if x is None or t is bool or t is str or t is float:
            return x
        if t is int:
            return x if -_BIG < x < _BIG else ["I", format(x, "x")]
        if depth > MAX_DEPTH:
            raise ValueError(f"a value nested more than {MAX_DEPTH} levels deep cannot be sent")
        rid = self.peer.own_handle(x) if self.peer is not None else None
        if rid is not None:
            return ["R", rid]   # the other side's own object, going home
        simple = self._simple(x)
        if simple is not None:
            return simple
        if isinstance(x, (list, tuple, dict, set, frozenset)):
            return self._container(x, depth, path if path is not None else set())
        if self.peer is None:
            raise ValueError(f"a {type(x).__name__} is not data")
        return ["H", self.peer.export(x), type(x).__name__]

    def _simple(self, x: object) -> object:
        """A non-container value of a data type (its subclasses included), or None."""
        if isinstance(x, bool):
            return bool(x)
        if isinstance(x, int):
            v = int.__index__(x)
            return v if -_BIG < v < _BIG else ["I", format(v, "x")]
        if isinstance(x, float):
            return float.__float__(x)
        if isinstance(x, str):
            return str.__str__(x)
        if isinstance(x, complex):
            return ["C", x.real, x.imag]
        if isinstance(x, (bytes, bytearray)):
            return ["A" if isinstance(x, bytearray) else "B", _b64(bytes(x))]
        if isinstance(x, fractions.Fraction):
            return ["Q", format(x.numerator, "x"), format(x.denominator, "x")]
        if isinstance(x, decimal.Decimal):
            return ["M", str(x)]
        if isinstance(x, datetime.timedelta):
            return ["TD", x.days, x.seconds, x.microseconds]
        if isinstance(x, (datetime.datetime, datetime.time)) and x.tzinfo is None:
            return ["DT" if isinstance(x, datetime.datetime) else "TI", x.isoformat()]
        if isinstance(x, datetime.date) and not isinstance(x, datetime.datetime):
            return ["DA", x.isoformat()]
        return None

    def _container(self, x: object, depth: int, path: set) -> list:
        if id(x) in path:
            raise ValueError("a value that contains itself cannot be sent")
        path.add(id(x))
        try:
            if isinstance(x, dict):
                return ["D", [[self.encode(k, depth + 1, path), self.encode(v, depth + 1, path)]
                              for k, v in list(dict.items(x))]]
            tag = "L" if isinstance(x, list) else "T" if isinstance(x, tuple) else \
                "S" if isinstance(x, set) else "F"
            return [tag, [self.encode(v, depth + 1, path) for v in list(x)]]   # type: ignore[call-overload]
        finally:
            path.discard(id(x))

    def decode(self, v: object) -> object:
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is not list or not v or type(v[0]) is not str:
            raise ProtocolError(f"not a value: {str(v)[:80]}")
        tag, args = v[0], v[1:]
        if tag in _SEQUENCES:
            return _SEQUENCES[tag](self.decode(item) for item in _one(args, list))
        if tag == "D":
            return {self.decode(_pair(p)[0]): self.decode(p[1]) for p in _one(args, list)}
        if tag == "H":
            return self.peer.remote(_int(args[0]), str(args[1]) if len(args) > 1 else "object")
        if tag == "R":
            return self.peer.exported_object(_int(args[0]))
        maker = _SCALARS.get(tag)
        if maker is None:
            raise ProtocolError(f"unknown value tag {tag!r}")
        try:
            return maker(*args)
        except (TypeError, ValueError, ArithmeticError, decimal.DecimalException) as exc:
            raise ProtocolError(f"bad {tag} value: {exc}") from None


def _one(args: list, kind: type) -> object:
    if len(args) != 1 or type(args[0]) is not kind:
        raise ProtocolError("malformed container")
    return args[0]


def _pair(p: object) -> list:
    if type(p) is not list or len(p) != 2:
        raise ProtocolError("malformed dict item")
    return p


def _int(v: object) -> int:
    if type(v) is not int:
        raise ProtocolError("malformed handle")
    return v


def _hex(h: str) -> int:
    if type(h) is not str:
        raise TypeError("hex digits expected")
    return int(h, 16)


_SEQUENCES = {"L": list, "T": tuple, "S": set, "F": frozenset}
_SCALARS = {
    "I": _hex,
    "C": lambda re, im: complex(float(re), float(im)),
    "B": lambda s: base64.b64decode(s, validate=True),
    "A": lambda s: bytearray(base64.b64decode(s, validate=True)),
    "Q": lambda n, d: fractions.Fraction(_hex(n), _hex(d)),
    "M": lambda s: decimal.Decimal(str(s)),
    "TD": lambda d, s, us: datetime.timedelta(days=d, seconds=s, microseconds=us),
    "DT": lambda s: datetime.datetime.fromisoformat(str(s)),
    "TI": lambda s: datetime.time.fromisoformat(str(s)),
    "DA": lambda s: datetime.date.fromisoformat(str(s)),
}
