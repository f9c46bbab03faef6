"""C and C++ links: libcrypto (openssl/md5.h) is linked only into a program that calls one of its
functions, which gives the same program --as-needed gave, without gold reading libcrypto's
symbols for every link. A program that defines a function libcrypto also has keeps its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proctor.sandbox import Job
from proctor.sandbox.engine import connect
from proctor.sandbox.images import require_image

sys.path.insert(0, str(Path(__import__("proctor.sandbox").sandbox.__file__).parent / "server"))
import native  # noqa: E402

AS_NEEDED = ["-Wl,--push-state,--as-needed", "-lcrypto", "-Wl,--pop-state"]


def test_crypto_is_linked_only_for_a_strong_undefined_reference(monkeypatch):
    monkeypatch.setattr(native, "crypto_symbols", lambda: frozenset({"MD5", "EVP_DigestInit"}))
    assert native.crypto_options({"main.o": {"MD5": "U", "main": "T"}}) == AS_NEEDED
    assert native.crypto_options({"tests.o": {"EVP_DigestInit": "U"}, "main.o": {"f": "T"}}) == AS_NEEDED
    # The program's own MD5, a weak reference (which --as-needed does not count either), other names.
    assert native.crypto_options({"main.o": {"MD5": "T", "printf": "U"}}) == []
    assert native.crypto_options({"main.o": {"MD5": "w"}}) == []
    assert native.crypto_options({}) == []


def test_without_the_list_every_link_reads_libcrypto(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "CRYPTO_SYMBOLS", str(tmp_path / "absent.txt"))
    assert native.crypto_options({"main.o": {"main": "T"}}) == AS_NEEDED


@pytest.mark.docker
def test_the_image_lists_libcrypto(docker_ready):
    ref = require_image(connect(), "cpp")
    out = subprocess.run(["docker", "run", "--rm", "--network=none", "--entrypoint", "sh", ref, "-c",
                          f"wc -l < {native.CRYPTO_SYMBOLS} && grep -cx -e MD5 -e EVP_DigestInit {native.CRYPTO_SYMBOLS}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, found = map(int, out.stdout.split())
    assert count > 1000 and found == 2


HEX = "#include <stdio.h>\n#include <string.h>\n#include <openssl/md5.h>\n"
MD5_MAIN = ("int main(void) { char s[64] = {0}; unsigned char d[16]; if (!fgets(s, sizeof s, stdin)) return 1;"
            " s[strcspn(s, \"\\n\")] = 0; MD5((const unsigned char *)s, strlen(s), d);"
            " for (int i = 0; i < 16; i++) printf(\"%02x\", d[i]); printf(\"\\n\"); return 0; }\n")
HELLO_MD5 = "5d41402abc4b2a76b9719d911017c592\n"   # md5("hello")


@pytest.mark.docker
@pytest.mark.parametrize("language", ["c", "cpp"])
def test_a_program_that_calls_md5_links_and_runs(sandbox, language):
    r = sandbox.run(Job(language=language, code=HEX + MD5_MAIN, cases=[("hello\n", HELLO_MD5)]))
    assert r.status == "passed", r.stderr


@pytest.mark.docker
def test_tests_that_call_md5_link_too(sandbox):
    code = "#include <string>\nstd::string shout(const std::string& s) { return s + \"!\"; }\n"
    tests = ("#include <cassert>\n#include <cstring>\n#include <string>\n#include <openssl/md5.h>\n"
             "std::string shout(const std::string&);\n"
             "int main() { std::string s = shout(\"hello\"); unsigned char d[16];"
             " MD5((const unsigned char*)s.data(), s.size(), d); assert(d[0] == 0x5a && d[1] == 0x8d);"
             " }\n")   # md5("hello!") starts 5a8d
    r = sandbox.run(Job(language="cpp", code=code, tests=tests))
    assert r.status == "passed", r.stderr


@pytest.mark.docker
def test_a_program_keeps_its_own_md5(sandbox):
    """No libcrypto in the link: the program's MD5 (same name, its own meaning) is the one called."""
    own = ("#include <stdio.h>\nunsigned char *MD5(const unsigned char *d, unsigned long n, unsigned char *md)"
           " { (void)d; md[0] = (unsigned char)n; return md; }\n"
           "int main(void) { unsigned char md[1]; MD5((const unsigned char *)\"abc\", 3, md); printf(\"%d\\n\", md[0]); }\n")
    r = sandbox.run(Job(language="c", code=own, cases=[("", "3\n")]))
    assert r.status == "passed", r.stderr
