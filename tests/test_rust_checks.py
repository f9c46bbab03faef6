"""What a Rust program with tests may not write (sandbox/server/rustcheck.py), checked without a sandbox.

Each refused program is a way to make the tests' comparisons say what the program
wants: a comparison impl written out, built by a macro, hidden behind a `use` rename
or behind a type whose text ends a naive header scan. The accepted ones are shapes
right solutions use (derives, Display impls, bounds, impl Trait, expression macros).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__import__("proctor.sandbox").sandbox.__file__).parent / "server"))
from rustcheck import impl_trait, rust_refusal  # noqa: E402

ACCEPTED = {
    "derive": "#[derive(PartialEq, Eq, PartialOrd, Ord, Debug)]\nstruct P { x: i64 }\n",
    "Display impl": ("use std::fmt;\nstruct P;\nimpl fmt::Display for P {\n    fn fmt(&self, f: &mut fmt::Formatter) "
                     "-> fmt::Result { write!(f, \"p\") }\n}\n"),
    "inherent impl with a bound": "struct W<T>(T);\nimpl<T: PartialEq + Clone> W<T> { fn same(&self, o: &T) -> bool { self.0 == *o } }\n",
    "trait impl with a bound": "struct W<T>(T);\nimpl<T: PartialEq> From<T> for W<T> { fn from(t: T) -> Self { W(t) } }\n",
    "impl Trait argument": "fn f(x: impl PartialEq<i64>) -> bool { x == 3 }\n",
    "impl Trait result": "fn f() -> impl Iterator<Item = i64> { 0..3 }\n",
    "for loop in a method": "struct P;\nimpl P { fn f(&self) { for _ in 0..3 {} } }\n",
    "closure bound with an arrow": "struct P;\nimpl<F: Fn(i64) -> i64> From<F> for P { fn from(_: F) -> P { P } }\n",
    "expression macro": "macro_rules! sq { ($x:expr) => { $x * $x }; }\nfn f(a: i64) -> i64 { sq!(a) }\n",
    "names in strings and comments": "// impl PartialEq for A\nfn f() -> &'static str { \"use std::cmp::PartialEq as Same;\" }\n",
    "use without a std rename": "use std::collections::HashMap as Map;\nuse std::fmt::Write as _;\n",
}

REFUSED = {
    "written out": ("impl<T> PartialEq<T> for A {}\n", "implements PartialEq"),
    "full path": ("impl<T> core::cmp::PartialOrd<T> for A {}\n", "implements PartialOrd"),
    "raw identifier": ("impl<T> r#PartialEq<T> for A {}\n", "implements PartialEq"),
    "comment inside the path": ("impl<T> std::cmp:: /* */ Ord for A {}\n", "implements Ord"),
    "inside a function": ("fn f() { impl Eq for A {} }\n", "implements Eq"),
    "projection with a ;": ("impl PartialEq<<[i64; 1] as IntoIterator>::Item> for A {}\n", "implements PartialEq"),
    "const block with a >": ("impl PartialEq<[u8; { 2 > 1 } as usize]> for A {}\n", "implements PartialEq"),
    "through a module alias": ("use std::cmp::{self as c};\nimpl<T> c::PartialEq<T> for A {}\n", "implements PartialEq"),
    "built by a macro": ("macro_rules! c { ($t:ident) => { impl<T> $t<T> for A {} }; }\nc!(PartialEq);\n",
                         "writes items ('impl')"),
    "macro with spaces": ("macro_rules ! c { ($t:ident) => { impl<T> $t<T> for A {} }; }\nc!(PartialEq);\n",
                          "writes items ('impl')"),
    "rename built by a macro": ("macro_rules! c { ($t:ident) => { use std::cmp::$t as Same; }; }\nc!(PartialEq);\n",
                                "writes items ('use')"),
    "renamed by use": ("use std::cmp::PartialEq as Same;\nimpl<T> Same<T> for A {}\n", "renames 'PartialEq'"),
    "renamed in a group": ("use std::cmp::{Ordering, PartialEq as Same};\n", "renames 'PartialEq'"),
    "re-exported renamed": ("mod m { pub use std::cmp::PartialEq as Same; }\n", "renames 'PartialEq'"),
    "std name declared": ("struct Vec;\n", "declares 'Vec'"),
    "std macro declared": ("macro_rules! assert_eq { () => {}; }\n", "declares 'assert_eq'"),
    "exported macro": ("#[macro_export]\nmacro_rules! m { () => {}; }\n", "macro_export"),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_right_solution_shapes_are_accepted(name):
    assert rust_refusal(ACCEPTED[name]) is None


@pytest.mark.parametrize("name", list(REFUSED))
def test_forged_comparisons_are_refused_naming_why(name):
    code, why = REFUSED[name]
    assert why in (rust_refusal(code) or "")


def test_impl_trait_reads_the_header_with_brackets_balanced():
    def trait(src: str) -> str | None:
        return impl_trait(src, src.index("impl") + 4)

    assert trait("impl<T: Fn() -> u8> a::b::Tr<X<Y>> for Z {}") == "Tr"
    assert trait("impl Z { fn f() { for x in y {} } }") is None        # inherent: its `for` is inside the body
    assert trait("fn f(x: impl Tr) -> u8 { 0 }") is None              # impl Trait in an argument
    assert trait("fn f() -> impl Tr<A> { 0 }") is None
