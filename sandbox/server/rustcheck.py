"""What a Rust program that comes with tests may not write: the checks before rustc runs.

Stdlib only: copied into the images beside the fork server.

The tests and the program are one crate (the tests first, then an ``include!`` of the
program), so the program's items can change what the tests' code means:

* a comparison it writes itself (``impl PartialEq<i64> for Mine`` whose ``eq`` says
  true) decides every ``assert_eq!``/``==`` of the tests on its values;
* a name of std's it declares (``struct Vec``, ``macro_rules! assert_eq``, ``use x as
  assert_eq``) replaces std's in the tests (they ``use super::*``);
* an exported macro reaches the tests' module.

The checks read the source with comments and literals blanked. Every item the program
has must therefore be written out: a ``macro_rules!`` whose body writes items (``impl``,
``use``, ``struct``, ...) could build one from pieces no check sees
(``$tr<T> for Mine`` with ``$tr`` = ``PartialEq``), so it is refused; and a ``use`` may
not rename a name of std's (``PartialEq as Same`` would hide the trait of an impl).
An impl's trait is found by reading its header with brackets balanced, so a type such
as ``<[i64; 1] as IntoIterator>::Item`` in it does not end the header early.
"""

from __future__ import annotations

import re

_SKIP = re.compile(r'//[^\n]*|/\*.*?\*/|b?"(?:\\.|[^"\\])*"|b?r(#*)".*?"\1|\'(?:\\.|[^\'\\\n])\'', re.DOTALL)
# Names the tests rely on: std's prelude types, traits and variants, the primitive
# types, std's macros.
RUST_TYPES = frozenset("""
    Vec String Option Some None Result Ok Err Box ToString ToOwned Clone Copy Default Eq PartialEq Ord PartialOrd
    Iterator IntoIterator DoubleEndedIterator ExactSizeIterator Extend Fn FnMut FnOnce Drop Send Sync Sized Unpin
    From Into TryFrom TryInto AsRef AsMut FromIterator Debug Hash std core alloc
    i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize f32 f64 bool char str
""".split())
RUST_MACROS = frozenset("""
    assert assert_eq assert_ne debug_assert debug_assert_eq debug_assert_ne panic vec format print println
    eprint eprintln write writeln matches unreachable unimplemented todo concat stringify include include_str
    include_bytes env option_env cfg line column file module_path
""".split())
COMPARISONS = frozenset({"PartialEq", "PartialOrd", "Eq", "Ord"})
_ITEM = re.compile(r"(?<!['*])\b(?:struct|enum|union|type|trait|mod|static|const)\s+(?:r#)?(\w+)"
                   r"|\bextern\s+crate\s+\w+\s+as\s+(\w+)")
_MACRO = re.compile(r"\bmacro_rules\s*!\s*(?:r#)?(\w+)\s*")
_ITEM_WORDS = re.compile(r"\b(impl|use|struct|enum|union|type|trait|mod|static|const|fn|extern|macro_rules)\b")
_USE = re.compile(r"\buse\b[^;]*;")
_RENAME = re.compile(r"(?:r#)?(\w+)\s+as\s+(?:r#)?(\w+)")
_IMPL = re.compile(r"\bimpl\b")


def rust_refusal(code: str) -> str | None:
    """Why the program may not be compiled with the tests, or None."""
    flat = _SKIP.sub(" ", code)
    if re.search(r"\bmacro_export\b", flat):
        # Textual macro scope only flows forward, and the tests come first: only an
        # exported macro would reach them.
        return "#[macro_export] is not available: it could redefine the tests' assert macros"
    for check in (_macro_writing_items, _comparison_impl, _renamed_std_name, _declared_std_name):
        why = check(flat)
        if why:
            return why
    return None


def _macro_writing_items(flat: str) -> str | None:
    for m in _MACRO.finditer(flat):
        body = _balanced(flat, m.end())
        word = _ITEM_WORDS.search(body)
        if word:
            return (f"macro_rules! {m.group(1)} writes items ({word.group(1)!r}); write them out instead "
                    "(the checks of what a program may declare read items as written)")
    return None


def _comparison_impl(flat: str) -> str | None:
    for m in _IMPL.finditer(flat):
        trait = impl_trait(flat, m.end())
        if trait in COMPARISONS:
            return (f"the program implements {trait} itself; the tests compare values with it "
                    f"(use #[derive({trait})])")
    return None


def _renamed_std_name(flat: str) -> str | None:
    for use in _USE.findall(flat):
        for original, alias in _RENAME.findall(use):
            if original in RUST_TYPES or original in RUST_MACROS:
                return f"the program renames {original!r} (as {alias!r}), a name of Rust's standard library the tests rely on"
    return None


def _declared_std_name(flat: str) -> str | None:
    declared = [g for m in _ITEM.finditer(flat) for g in m.groups() if g]
    declared += [name for name in _MACRO.findall(flat) if name in RUST_MACROS]
    declared += [alias for use in _USE.findall(flat) for _, alias in _RENAME.findall(use)]
    for name in declared:
        if name in RUST_TYPES or name in RUST_MACROS:
            return f"the program declares {name!r}, a name of Rust's standard library the tests rely on; rename it"
    return None


def impl_trait(flat: str, at: int) -> str | None:
    """The last path segment of the trait of the impl whose header starts at ``at`` (after
    ``impl``), or None for an inherent impl or an ``impl Trait`` type."""
    i = _skip_space(flat, at)
    if flat.startswith("<", i):
        i = _group_end(flat, i)
    start = i
    for j, c, depth in _scan(flat, start):
        if depth < 0:
            return None              # `impl Trait` in a type, inside brackets
        if depth == 0 and c in "{;":
            return None              # inherent impl, or `-> impl Trait {`
        if depth == 0 and flat.startswith("for", j) and not _word(flat[j - 1]) and not _word(flat[j + 3:j + 4]):
            path = flat[start:j].strip()
            if path:
                return _last_segment(path)
    return None


def _scan(text: str, i: int):
    """(index, char, depth before it) from ``i`` on, brackets balanced: a ``>`` closes only a
    ``<`` (else it is an operator, as in ``{ N > 1 }``), ``->`` closes nothing, and a closing
    ``)``/``]``/``}`` also closes the ``<`` left open inside it. Depth -1: a bracket closed that
    opened before ``i``."""
    stack: list[str] = []
    while i < len(text):
        c = text[i]
        if text.startswith("->", i):
            i += 2
            continue
        yield i, c, len(stack)
        if c in "([{<":
            stack.append(c)
        elif c == ">":
            if stack and stack[-1] == "<":
                stack.pop()
        elif c in ")]}":
            opener = "([{"[")]}".index(c)]
            while stack and stack[-1] == "<":
                stack.pop()
            if not stack:
                yield i, c, -1
                return
            if stack[-1] == opener:
                stack.pop()
        i += 1


def _group_end(text: str, i: int) -> int:
    """The index just after the bracketed group opened at ``i``."""
    for j, c, depth in _scan(text, i):
        if j > i and depth == 0:
            return j
    return len(text)


def _last_segment(path: str) -> str:
    """``a::b::Trait<X, Y>`` -> ``Trait`` (generic arguments dropped, ``r#`` and ``?``/``!`` too)."""
    bare = "".join(c for j, c, depth in _scan(path, 0) if depth == 0 and c not in "<")
    segment = bare.split("::")[-1].strip().lstrip("!?")
    return segment.removeprefix("r#")


def _balanced(text: str, i: int) -> str:
    """The bracketed group that starts at ``i`` (its text), or '' when none starts there."""
    if i >= len(text) or text[i] not in "([{":
        return ""
    return text[i:_group_end(text, i)]


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _word(c: str) -> bool:
    return bool(c) and (c.isalnum() or c == "_")
