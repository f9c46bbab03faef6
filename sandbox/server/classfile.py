"""Just enough of the Java class-file format to see what a compiled class declares.

Stdlib only: copied into the images beside the fork server.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# Constant-pool entry sizes after the tag byte (Utf8 is variable; Long and Double take two slots).
_SIZES = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}


@dataclass(frozen=True)
class ClassInfo:
    name: str                          # binary name, with '/' (a/b/C, C$Inner)
    source_file: str                   # the SourceFile attribute ("" when absent)
    methods: tuple[tuple[str, str], ...]   # (name, descriptor)
    classes: tuple[str, ...] = ()          # every class the constant pool names
    members: tuple[tuple[str, str], ...] = ()   # every (class, member name) it refers to
    texts: tuple[str, ...] = ()            # every Utf8 constant (names, descriptors, string literals)


def read_class(data: bytes) -> ClassInfo:
    """Parse a class file; raises ValueError when it is not one."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    pos = 8
    (count,) = struct.unpack_from(">H", data, pos)
    pos += 2
    utf8: dict[int, str] = {}
    classes: dict[int, int] = {}                 # Class entry -> its name's Utf8
    refs: list[tuple[int, int]] = []             # (Class entry, NameAndType entry) of Field/Method refs
    name_and_type: dict[int, int] = {}           # NameAndType entry -> its name's Utf8
    index = 1
    while index < count:
        tag = data[pos]
        pos += 1
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos)
            utf8[index] = data[pos + 2:pos + 2 + length].decode("utf-8", errors="replace")
            pos += 2 + length
        elif tag in _SIZES:
            if tag == 7:
                classes[index] = struct.unpack_from(">H", data, pos)[0]
            elif tag in (9, 10, 11):
                refs.append(struct.unpack_from(">HH", data, pos))
            elif tag == 12:
                name_and_type[index] = struct.unpack_from(">H", data, pos)[0]
            pos += _SIZES[tag]
        else:
            raise ValueError(f"unknown constant-pool tag {tag}")
        index += 2 if tag in (5, 6) else 1
    members = tuple((utf8.get(classes.get(c, 0), ""), utf8.get(name_and_type.get(nt, 0), "")) for c, nt in refs)
    _flags, this_class, _super = struct.unpack_from(">HHH", data, pos)
    pos += 6
    (interfaces,) = struct.unpack_from(">H", data, pos)
    pos += 2 + 2 * interfaces
    pos = _skip_members(data, pos)                     # fields
    methods, pos = _members(data, pos, utf8)           # methods
    source_file = ""
    (attributes,) = struct.unpack_from(">H", data, pos)
    pos += 2
    for _ in range(attributes):
        name_index, length = struct.unpack_from(">HI", data, pos)
        if utf8.get(name_index) == "SourceFile" and length == 2:
            source_file = utf8.get(struct.unpack_from(">H", data, pos + 6)[0], "")
        pos += 6 + length
    return ClassInfo(utf8.get(classes.get(this_class, 0), ""), source_file, tuple(methods),
                     tuple(utf8.get(i, "") for i in classes.values()), members, tuple(utf8.values()))


def _skip_members(data: bytes, pos: int) -> int:
    (count,) = struct.unpack_from(">H", data, pos)
    pos += 2
    for _ in range(count):
        pos = _skip_attributes(data, pos + 6)
    return pos


def _members(data: bytes, pos: int, utf8: dict[int, str]) -> tuple[list[tuple[str, str]], int]:
    (count,) = struct.unpack_from(">H", data, pos)
    pos += 2
    out = []
    for _ in range(count):
        _flags, name, descriptor = struct.unpack_from(">HHH", data, pos)
        out.append((utf8.get(name, ""), utf8.get(descriptor, "")))
        pos = _skip_attributes(data, pos + 6)
    return out, pos


def _skip_attributes(data: bytes, pos: int) -> int:
    (count,) = struct.unpack_from(">H", data, pos)
    pos += 2
    for _ in range(count):
        (length,) = struct.unpack_from(">I", data, pos + 2)
        pos += 6 + length
    return pos
