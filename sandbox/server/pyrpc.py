"""Calls between the tests (the judge process) and the program (the candidate process).

Stdlib only: copied into the images beside the fork server.

The tests of a Python job never run in the program's process: the judge runs them,
and every name the program defined is, in the judge, a proxy whose calls travel over
one socket. What travels is data, never code and never objects:

* plain values (None, bool, int, float, complex, str, bytes, bytearray, list, tuple,
  dict, set, frozenset, Fraction, Decimal, naive date/time/datetime, timedelta) are
  copied, as their base type: a value of the program's own subclass arrives as the
  plain value it holds, so no method of the program's ever runs in the judge. An
  object whose ``__eq__`` always says True arrives as a handle, and a handle equals
  only itself;
* anything else travels as a handle: a number that names the object on the side that
  owns it. Calling a handle, reading its attributes, iterating it, indexing it, taking
  its len/str/repr: each is a request to the owner, answered with data or a handle;
* an exception comes back as its builtin class (or a local class standing in for an
  exception class of the program's), never as SystemExit or KeyboardInterrupt: those
  arrive as ProgramExit, which no ``except Exception`` in the tests swallows.

Lists, dicts, sets and bytearrays passed as arguments are copied back after the call
when the callee changed them (a program that sorts its argument in place).

Both sides run one thread of calls: a side that waits for its answer serves the
requests the other side makes meanwhile (a program calling a callback of the tests),
so requests nest like calls. The judge serves less: public attributes only, and no
attribute that holds a method can be replaced.

Wire: 4-byte big-endian length + ASCII JSON of one message.
"""

from __future__ import annotations

import _thread
import builtins
import os
import traceback
import types
import weakref

from pywire import MAX_DEPTH, MAX_MESSAGE, Channel, Codec, PeerGone, ProtocolError, _int

_EXIT_TYPES = (SystemExit, KeyboardInterrupt, GeneratorExit)
_HERE = os.path.abspath(__file__)
_MUTABLE = (list, dict, set, bytearray)


class ProgramExit(BaseException):
    """The program raised SystemExit/KeyboardInterrupt/GeneratorExit inside a call."""


class RemoteError(Exception):
    """An exception of the other side whose class has no builtin counterpart here."""


# --------------------------------------------------------------------------- handles

class Remote:
    """An object of the other process. Equal only to itself; everything else is a request."""

    __slots__ = ("_peer", "_rid", "_type", "__weakref__")

    def __init__(self, peer: "Peer", rid: int, type_name: str) -> None:
        object.__setattr__(self, "_peer", peer)
        object.__setattr__(self, "_rid", rid)
        object.__setattr__(self, "_type", type_name)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._peer.call(self._rid, args, kwargs)

    def __getattr__(self, name: str) -> object:
        return self._peer.ask("getattr", self._rid, name=name)

    def __setattr__(self, name: str, value: object) -> None:
        self._peer.ask("setattr", self._rid, name=name, value=self._peer.codec.encode(value))

    def __iter__(self) -> object:
        return self._peer.ask("iter", self._rid)

    def __next__(self) -> object:
        return self._peer.ask("next", self._rid)

    def __len__(self) -> int:
        n = self._peer.ask("len", self._rid)
        if type(n) is not int or n < 0:
            raise TypeError("len() of a program object did not give a non-negative int")
        return n

    def __getitem__(self, key: object) -> object:
        return self._peer.ask("getitem", self._rid, key=self._peer.codec.encode(key))

    def __setitem__(self, key: object, value: object) -> None:
        codec = self._peer.codec
        self._peer.ask("setitem", self._rid, key=codec.encode(key), value=codec.encode(value))

    def __contains__(self, item: object) -> bool:
        return self._peer.ask("contains", self._rid, key=self._peer.codec.encode(item)) is True

    def __instancecheck__(self, obj: object) -> bool:
        return self._peer.ask("isinstance", self._rid, key=self._peer.codec.encode(obj)) is True

    def __str__(self) -> str:
        return self._text("str")

    def __repr__(self) -> str:
        return self._text("repr")

    def _text(self, op: str) -> str:
        try:
            text = self._peer.ask(op, self._rid)
        except Exception:   # noqa: BLE001 - a repr must not fail because the other side's does
            text = None
        return text if type(text) is str else f"<{self._type} object of the program>"

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return object.__hash__(self)

    def __bool__(self) -> bool:
        return True

    def __del__(self) -> None:
        try:
            self._peer.released.append(self._rid)
        except Exception:   # noqa: BLE001 - interpreter shutdown
            pass


# --------------------------------------------------------------------------- one side

class Peer:
    """One end of the connection: makes requests, serves the other side's, keeps exported objects.

    ``judge``: this is the tests' side, which serves the program only public
    attributes and never lets it replace an attribute that holds a method.
    """

    def __init__(self, channel: Channel, *, judge: bool) -> None:
        self.channel = channel
        self.judge = judge
        self.codec = Codec(self)
        self._objects: dict[int, object] = {}
        self._ids: dict[int, int] = {}          # id(obj) -> handle, for objects we exported
        self._remotes: "weakref.WeakValueDictionary[int, Remote]" = weakref.WeakValueDictionary()
        self.released: list[int] = []
        self.exception_classes: dict[int, type] = {}   # the other side's exception classes, as ours
        # _thread, not threading: importing threading into the mother would cost every
        # forked runner its at-fork handler (about 130 page copies, 0.2 ms).
        self._serving = _thread.get_ident()
        self._next = 1

    # ---------------------------------------------------------------- objects
    def export(self, obj: object) -> int:
        rid = self._ids.get(id(obj))
        if rid is None:
            rid, self._next = self._next, self._next + 1
            self._objects[rid] = obj
            self._ids[id(obj)] = rid
        return rid

    def own_handle(self, obj: object) -> int | None:
        """The other side's id of ``obj`` when it is a proxy of this peer's: it goes home as itself."""
        return obj._rid if isinstance(obj, Remote) and obj._peer is self else None

    def exported_object(self, rid: int) -> object:
        if rid not in self._objects:
            raise ProtocolError(f"no object {rid} was handed out")
        return self._objects[rid]

    def remote(self, rid: int, type_name: str) -> object:
        if rid in self.exception_classes:
            return self.exception_classes[rid]
        proxy = self._remotes.get(rid)
        if proxy is None:
            proxy = Remote(self, rid, type_name)
            self._remotes[rid] = proxy
        return proxy

    # ---------------------------------------------------------------- requests
    def call(self, rid: int, args: tuple, kwargs: dict) -> object:
        enc_args = [self.codec.encode(a) for a in args]
        enc_kwargs = {str(k): self.codec.encode(v) for k, v in kwargs.items()}
        reply = self._request({"op": "call", "obj": rid, "args": enc_args, "kwargs": enc_kwargs})
        for index, value in reply.get("sync", ()):
            target = args[index] if type(index) is int and 0 <= index < len(args) else kwargs.get(index)
            _copy_back(target, self.codec.decode(value))
        return self._result(reply)

    def ask(self, op: str, rid: int, **fields: object) -> object:
        return self._result(self._request({"op": op, "obj": rid, **fields}))

    def _request(self, message: dict) -> dict:
        if _thread.get_ident() != self._serving:
            raise RuntimeError("objects of the other process can be used only from the main thread")
        if self.released:
            message["release"], self.released = self.released, []
        self.channel.send(message)
        while True:
            incoming = self.channel.recv()
            if "op" in incoming:
                self.serve(incoming)
            else:
                return incoming

    def _result(self, reply: dict) -> object:
        if "err" in reply:
            raise self._error(reply["err"])
        if "ok" not in reply:
            raise PeerGone(f"the other process sent a malformed reply: {str(reply)[:100]}")
        try:
            return self.codec.decode(reply["ok"])
        except (ProtocolError, ValueError, TypeError, RecursionError, MemoryError) as exc:
            raise PeerGone(f"the other process sent a malformed value: {exc}") from None

    def _error(self, err: object) -> BaseException:
        if type(err) is not dict:
            return PeerGone("the other process sent a malformed error")
        cls = exception_class(err, self.exception_classes)
        try:
            args = tuple(self.codec.decode(err["args"])) if err.get("args") is not None else (str(err.get("msg", "")),)
        except (ProtocolError, ValueError, TypeError, RecursionError):
            args = (str(err.get("msg", "")),)
        try:
            exc = cls(*args)
        except Exception:   # noqa: BLE001 - an exception class whose __init__ wants other arguments
            exc = cls.__new__(cls)
            exc.args = args
        where = err.get("tb")
        if type(where) is str and where:
            exc.add_note(where)
        return exc

    # ---------------------------------------------------------------- serving
    def serve(self, message: dict) -> None:
        """Answer one request of the other side (objects it names must be ours)."""
        for rid in message.get("release") or ():
            obj = self._objects.pop(rid, None) if type(rid) is int else None
            if obj is not None:
                self._ids.pop(id(obj), None)
        try:
            reply = self._answer(message)
        except PeerGone:
            raise
        except BaseException as exc:   # noqa: BLE001 - every error goes back to the caller (SystemExit too)
            reply = {"err": error_message(exc, self)}
        self.channel.send(reply)

    def _answer(self, m: dict) -> dict:
        op = m.get("op")
        obj = self.exported_object(_int(m.get("obj")))
        if op == "call":
            return self._serve_call(obj, m)
        if op in ("getattr", "setattr"):
            name = m.get("name")
            if type(name) is not str:
                raise ProtocolError("attribute name expected")
            if self.judge:
                _judge_may_touch(obj, name, op)
            if op == "getattr":
                return self._ok(getattr(obj, name))
            setattr(obj, name, self.codec.decode(m.get("value")))
            return self._ok(None)
        if op in ("getitem", "contains", "setitem", "isinstance"):
            key = self.codec.decode(m.get("key"))
            if op == "getitem":
                return self._ok(obj[key])                                            # type: ignore[index]
            if op == "contains":
                return self._ok(key in obj)                                          # type: ignore[operator]
            if op == "isinstance":
                return self._ok(isinstance(key, obj) if isinstance(obj, type) else False)
            if self.judge:
                _judge_may_touch(obj, "[]", op)
            obj[key] = self.codec.decode(m.get("value"))                             # type: ignore[index]
            return self._ok(None)
        simple = _SIMPLE_OPS.get(op)   # type: ignore[arg-type]
        if simple is None:
            raise ProtocolError(f"unknown request {op!r}")
        return self._ok(simple(obj))

    def _serve_call(self, func: object, m: dict) -> dict:
        raw_args, raw_kwargs = m.get("args"), m.get("kwargs")
        if type(raw_args) is not list or type(raw_kwargs) is not dict:
            raise ProtocolError("malformed call")
        args = [self.codec.decode(a) for a in raw_args]
        kwargs = {str(k): self.codec.decode(v) for k, v in raw_kwargs.items()}
        result = func(*args, **kwargs)                                                # type: ignore[operator]
        reply = self._ok(result)
        sync = []
        for key, sent, value in [*zip(range(len(args)), raw_args, args), *((k, raw_kwargs[k], v) for k, v in kwargs.items())]:
            if isinstance(value, _MUTABLE):
                now = self.codec.encode(value)
                if now != sent:
                    sync.append([key, now])
        if sync:
            reply["sync"] = sync
        return reply

    def _ok(self, value: object) -> dict:
        return {"ok": self.codec.encode(value)}

    def serve_forever(self) -> None:
        """Serve until the other side says goodbye or goes."""
        while True:
            try:
                message = self.channel.recv()
            except PeerGone:
                return
            if message.get("op") == "bye":
                return
            if "op" not in message:
                continue   # a reply nobody waits for
            self.serve(message)


_SIMPLE_OPS = {"iter": iter, "next": next, "len": len, "str": str, "repr": repr}


def _judge_may_touch(obj: object, name: str, op: str) -> None:
    """What the program may do to an object the tests handed it: public data only."""
    if name.startswith("_"):
        raise AttributeError(f"{name!r}: the tests' objects show the program public attributes only")
    if op in ("setattr", "setitem"):
        if isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType,
                            types.BuiltinFunctionType)):
            raise TypeError(f"the program may not change the tests' {type(obj).__name__}")
        if op == "setattr" and callable(getattr(obj, name, None)):
            raise TypeError(f"the program may not replace the method {name!r} of an object of the tests")


def _copy_back(target: object, value: object) -> None:
    """Make an argument the callee changed equal to its new value, in place."""
    if isinstance(target, list) and isinstance(value, list):
        target[:] = value
    elif isinstance(target, dict) and isinstance(value, dict):
        target.clear()
        target.update(value)
    elif isinstance(target, set) and isinstance(value, set):
        target.clear()
        target.update(value)
    elif isinstance(target, bytearray) and isinstance(value, bytearray):
        target[:] = value


# --------------------------------------------------------------------------- exceptions

def builtin_base(cls: type) -> str:
    for base in cls.__mro__:
        if getattr(builtins, base.__name__, None) is base:
            return base.__name__
    return "Exception"


def error_message(exc: BaseException, peer: Peer) -> dict:
    """An exception as data: its class (builtin base, handle of its own class), args, where it happened."""
    cls = type(exc)
    out: dict = {"type": cls.__name__, "base": builtin_base(cls), "msg": _safe_str(exc), "tb": _where(exc)}
    if getattr(builtins, cls.__name__, None) is not cls:
        out["cls"] = peer.export(cls)
    try:
        out["args"] = peer.codec.encode(tuple(exc.args))
    except Exception:   # noqa: BLE001 - args that are not data: the message stands in
        pass
    return out


def exception_class(err: dict, local: dict[int, type]) -> type:
    """The class to raise here for an error of the other side."""
    if err.get("cls") in local:
        return local[err["cls"]]
    for name in (err.get("type"), err.get("base")):
        cls = getattr(builtins, name, None) if type(name) is str else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return ProgramExit if issubclass(cls, _EXIT_TYPES) else cls
    return RemoteError


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)[:4000]
    except Exception:   # noqa: BLE001 - a __str__ that fails
        return f"<{type(exc).__name__}>"


def _where(exc: BaseException) -> str:
    """The frames of the side that raised, without this module's, as a note for the other side."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) != _HERE]
    if not frames:
        return ""
    return "in the program:\n" + "".join(traceback.format_list(frames)).rstrip("\n")


def clean_traceback(exc: BaseException, skip: tuple[str, ...]) -> str:
    """An exception as Python prints it, without the frames of the files in ``skip`` (the harness)."""
    skip = tuple(os.path.abspath(s) for s in (*skip, _HERE))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) not in skip]
    text = "".join(traceback.format_exception_only(type(exc), exc))
    if not frames:
        return text
    return "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + text


def exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    return 1


__all__ = ["MAX_DEPTH", "MAX_MESSAGE", "Channel", "Codec", "builtin_base", "Peer", "PeerGone", "ProgramExit", "ProtocolError", "Remote", "RemoteError",
           "clean_traceback", "error_message", "exception_class", "exit_code"]
