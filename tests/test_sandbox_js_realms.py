"""JavaScript in two realms (images/node/launcher.js) against the real sandbox (Docker, no mocks).

The program runs in one vm context, its tests in another that the program never gets a
reference to; the tests see the program's values as copies and its functions and objects
through a membrane. So a wrong solution cannot pass by changing what the tests use
(intrinsics, node's assert and globals, the main realm), by reading the tests
(Function.caller, stack traces, files, fds, its own memory) or by exiting early. Each
attack below is a wrong solution that passes only if its attack works; 22 of these 36
passed with the one-realm launcher this replaced (measured: the realm, caller, stack-trace
and adaptive-value ones), the others guard what that launcher already refused or what the
two realms opened. The behaviours check that ordinary programs and tests still work:
every HumanEval-X problem, stdin/stdout, classes, callbacks, promises, in-place changes.
"""

from __future__ import annotations

import pytest
from humaneval_x import problems
from proctor.sandbox import Job, Limits, Result, Sandbox

pytestmark = pytest.mark.docker

LIM = Limits(wall_s=10, cpu_s=5, memory_mb=256)

# A helper some attacks share: find "== <number>" or 'xyzzy-<n>' in whatever test source
# the program can reach (the caller of `fn`, the functions and receivers on the stack).
GUESS = r"""
function reach(fn) {
  let src = '';
  try { src += String(fn.caller); } catch (e) { }
  try {
    const old = Error.prepareStackTrace;
    Error.prepareStackTrace = (e, sites) => sites;
    const sites = new Error().stack;
    Error.prepareStackTrace = old;
    for (const site of sites) {
      try { const f = site.getFunction(); if (f) src += String(f); } catch (e) { }
      try { const t = site.getThis(); if (t && t.console) src += Object.keys(t).join(); } catch (e) { }
    }
  } catch (e) { }
  return src;
}
function guessNumber(fn) {
  const m = /==\s*(\d+)/.exec(reach(fn));
  return m ? Number(m[1]) : -1;
}
"""

READ_TESTS = r"""
function readTests(paths) {
  const fs = require('fs');
  let src = '';
  for (const p of paths) {
    try { src += fs.readFileSync(p, 'utf8'); } catch (e) { }
  }
  for (const fd of [5, 6]) {
    try { const b = Buffer.alloc(65536); const n = fs.readSync(fd, b, 0, b.length, null); src += b.toString('utf8', 0, n); } catch (e) { }
  }
  const m = /'(xyzzy-\d+)'/.exec(src);
  return m ? m[1] : 'none';
}
"""

# Under runc node is not dumpable and /proc/self/mem does not open; under gVisor it is
# (its binary must be readable there), and the launcher refuses descriptors of it.
MEMORY = r"""
const fs = require('fs');
function regions() {
  const out = [];
  for (const line of fs.readFileSync('/proc/self/maps', 'utf8').split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) rw/.exec(line);
    if (m && parseInt(m[2], 16) - parseInt(m[1], 16) <= 64 << 20) out.push([parseInt(m[1], 16), parseInt(m[2], 16)]);
  }
  return out;
}
function scan(b) { const m = /'(xyzzy-[1-9]\d*)'/.exec(b.toString('latin1')); return m ? m[1] : null; }
async function viaRead(read) {
  for (const [start, end] of regions()) {
    const b = Buffer.alloc(end - start);
    try { await read(b, start); } catch (e) { continue; }
    const found = scan(b);
    if (found) return found;
  }
  return null;
}
async function secret(x) {
  const opens = [
    () => fs.openSync('/proc/self/mem', 'r'),
    () => fs.openSync(`/proc/${process.pid}/task/${process.pid}/mem`, 'r+'),
    () => { fs.symlinkSync('/proc/self/mem', '/work/m'); return fs.openSync('/work/m', 'r'); },
    () => new Promise((ok, bad) => fs.open('/proc/thread-self/mem', 'r', (e, fd) => (e ? bad(e) : ok(fd)))),
  ];
  for (const open of opens) {
    try {
      const fd = await open();
      const found = await viaRead((b, at) => fs.readSync(fd, b, 0, b.length, at));
      if (found) return found;
    } catch (e) { }
  }
  try {
    const h = await fs.promises.open('/proc/self/mem', 'r');
    const found = await viaRead((b, at) => h.read(b, 0, b.length, at));
    if (found) return found;
  } catch (e) { }
  try {
    const s = fs.createReadStream('/proc/self/mem', { start: regions()[0][0], end: regions()[0][1] });
    const chunks = [];
    for await (const c of s) chunks.push(c);
    const found = scan(Buffer.concat(chunks));
    if (found) return found;
  } catch (e) { }
  return 'none';
}
"""

SECRET_TESTS = "function check() {\n  console.assert(secret(1) === 'xyzzy-42');\n}\ncheck();\n"
ABS_TESTS = "console.assert(Math.abs(dist(3, 7) - 4) < 1e-9);\n"
FAILED = ("failed",)
FAILED_OR_ERROR = ("failed", "runtime_error")

# name -> (program, tests, statuses it may end with). None of them may pass.
ATTACKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # The program's realm is its own: what it replaces there, the tests do not use.
    "Math.abs replaced": ("const dist = (a, b) => 0;\nMath.abs = () => 0;\n", ABS_TESTS, FAILED),
    "Array.prototype.includes replaced": ("const pick = (xs) => 99;\nArray.prototype.includes = () => true;\n",
                                          "console.assert([2, 3].includes(pick([1, 2, 3])));\n", FAILED),
    "Array.prototype.every replaced": ("const evens = (xs) => [];\nArray.prototype.every = () => true;\n",
                                       "console.assert([2, 4].every((x, i) => x === evens([1, 2, 3, 4])[i]));\n",
                                       FAILED),
    "JSON.stringify replaced": (("const pair = () => [];\nJSON.stringify = () => 'same';\n"
                                 "globalThis.JSON = { stringify: () => 'same' };\n"),
                                "console.assert(JSON.stringify(pair()) === JSON.stringify([1, 2]));\n", FAILED),
    "Function.prototype.call replaced": ("const twice = (x) => 0;\nFunction.prototype.call = function () { return 4; };\n",
                                         "console.assert(twice.call(null, 2) === 4);\n", FAILED),
    "Function.prototype.apply replaced": (("const twice = (x) => 0;\n"
                                           "Function.prototype.apply = function () { return 4; };\n"),
                                          "console.assert(twice.apply(null, [2]) === 4);\n", FAILED),
    "Promise replaced": (("const twice = (x) => 0;\n"
                          "globalThis.Promise = class { static all() { return { then() { } }; } };\n"),
                         "Promise.all([twice(1), twice(2)]).then(([a, b]) => console.assert(a === 2 && b === 4));\n",
                         FAILED),
    "Promise.prototype.then replaced": (("const later = async (x) => 0;\nconst then = Promise.prototype.then;\n"
                                         "Promise.prototype.then = function (ok, bad) {\n"
                                         "  return then.call(this, () => ok(4), bad);\n};\n"),
                                        "later(2).then((v) => console.assert(v === 4));\n", FAILED),
    "own call/apply properties of the function": (("const twice = (x) => 0;\ntwice.call = () => 4;\n"
                                                   "twice.apply = () => 4;\n"),
                                                  "console.assert(twice.call(null, 2) === 4 && twice.apply(null, [2]) === 4);\n",
                                                  FAILED),
    "Symbol.hasInstance replaced": (("const toList = (s) => s;\n"
                                     "Object.defineProperty(Array, Symbol.hasInstance, { value: () => true });\n"),
                                    "console.assert(toList('abc') instanceof Array);\n", FAILED),
    "Object.is replaced": ("const neg = (x) => 0;\nObject.is = () => true;\n",
                           "console.assert(Object.is(neg(0), -0));\n", FAILED),
    # The main realm is reachable, but frozen where the tests or the launcher depend on it.
    "main realm via require/Buffer/fs constructors": (
        ("const dist = (a, b) => 0;\n"
         "for (const f of [require, Buffer, setTimeout, process.cwd, require('fs').readFileSync]) {\n"
         "  try { const g = f.constructor('return globalThis')(); g.Math.abs = () => 0; } catch (e) { }\n"
         "  try { const g = f.constructor('return globalThis')(); g.console.assert = () => {}; } catch (e) { }\n"
         "  try { f.constructor('return Array')().prototype.includes = () => true; } catch (e) { }\n"
         "  try { f.constructor('return Object')().prototype.strictEqual = () => {}; } catch (e) { }\n"
         "}\n"
         "try { require('assert').strictEqual = () => {}; } catch (e) { }\n"),
        ABS_TESTS + "require('assert').strictEqual(dist(1, 2), 1);\n", FAILED),
    "main realm via `this` of a callback": (
        ("const dist = (a, b) => 0;\nconst E = require('events');\nconst e = new E();\n"
         "e.on('x', function () {\n"
         "  const g = this.constructor.constructor('return globalThis')();\n"
         "  try { g.Math.abs = () => 0; } catch (err) { }\n"
         "  try { g.console.assert = () => {}; } catch (err) { }\n"
         "});\ne.emit('x');\n"
         "setImmediate(function () { try { this.constructor.constructor('return Math')().abs = () => 0; } "
         "catch (err) { } });\n"),
        ABS_TESTS, FAILED),
    "node's Buffer and btoa patched for the tests' expected values": (
        ("const enc = (s) => 'X';\n"
         "try { Buffer.prototype.toString = function () { return 'X'; }; } catch (e) { }\n"
         "try { Buffer.from = () => ({ toString: () => 'X' }); } catch (e) { }\n"
         "globalThis.Buffer = new Proxy(Buffer, { get: (t, k) => (k === 'from' ? () => ({ toString: () => 'X' }) : t[k]) });\n"
         "globalThis.btoa = () => 'X';\n"),
        "console.assert(enc('hi') === Buffer.from('hi').toString('base64'));\nconsole.assert(enc('hi') === btoa('hi'));\n",
        FAILED),
    "node's assert overwritten": (
        ("const add = (a, b) => 0;\nfor (const id of ['assert', 'assert/strict', 'node:assert']) {\n"
         "  for (const k of ['ok', 'equal', 'strictEqual', 'deepEqual', 'deepStrictEqual']) {\n"
         "    try { require(id)[k] = () => {}; } catch (e) { }\n  }\n}\n"),
        "const assert = require('node:assert');\nassert.deepEqual(add(1, 2), 3);\nassert.ok(add(1, 2) === 3);\n",
        FAILED),
    "util.isDeepStrictEqual overwritten": (("const pair = () => [];\n"
                                            "require('util').isDeepStrictEqual = () => true;\n"),
                                           "console.assert(require('util').isDeepStrictEqual(pair(), [1, 2]));\n",
                                           FAILED),
    "node's module loader patched for the tests' require": (
        ("const add = (a, b) => 0;\nconst Module = require('module');\n"
         "const fake = { strictEqual() {}, ok() {}, deepEqual() {}, deepStrictEqual() {} };\n"
         "Module._load = () => fake;\nModule._cache.assert = { loaded: true, exports: fake };\n"),
        "const assert = require('assert');\nassert.strictEqual(add(1, 2), 3);\n", FAILED),
    "main-realm Error.prepareStackTrace": (
        ("const add = (a, b) => 0;\n"
         "try {\n  const E = Buffer.constructor('return Error')();\n"
         "  E.prepareStackTrace = (e, sites) => {\n"
         "    try { const g = sites[sites.length - 1].getThis(); g.console.assert = () => {}; } catch (x) { }\n"
         "    return 'x';\n  };\n} catch (e) { }\n"),
        "try { require('assert').strictEqual(add(1, 2), 3); } catch (e) { }\nconsole.assert(add(1, 2) === 3);\n",
        FAILED),
    # Reading the tests: neither their functions, nor their source, nor their pipe.
    "Function.caller": (("function secret(x) {\n  const m = /'(xyzzy-\\d+)'/.exec(String(secret.caller));\n"
                         "  return m ? m[1] : 'none';\n}\n"), SECRET_TESTS, FAILED),
    "arguments.callee.caller": (("function secret(x) {\n"
                                 "  const m = /'(xyzzy-\\d+)'/.exec(String(arguments.callee.caller));\n"
                                 "  return m ? m[1] : 'none';\n}\n"), SECRET_TESTS, FAILED),
    "Error.prepareStackTrace getFunction/getThis": (
        GUESS + "function secret(x) {\n  const m = /'(xyzzy-\\d+)'/.exec(reach(secret));\n"
        "  return m ? m[1] : 'none';\n}\n", SECRET_TESTS, FAILED),
    "new Error().stack, then the files it names": (
        READ_TESTS + "function secret(x) {\n"
        "  const paths = [...new Error().stack.matchAll(/(\\/[^():\\s]+):\\d+/g)].map((m) => m[1]);\n"
        "  return readTests(paths);\n}\n", SECRET_TESTS, FAILED),
    "process.argv": (READ_TESTS + "function secret(x) { return readTests(process.argv); }\n", SECRET_TESTS, FAILED),
    "/proc/self/fd/6": (READ_TESTS + "function secret(x) {\n"
                        "  return readTests(['/proc/self/fd/5', '/proc/self/fd/6', '/dev/fd/6']);\n}\n",
                        SECRET_TESTS, FAILED),
    "fs.readFileSync of /work/tests.js": (READ_TESTS + "function secret(x) {\n"
                                          "  return readTests(['/work/tests.js', 'tests.js', '/work/main.js']);\n}\n",
                                          SECRET_TESTS, FAILED),
    "its own memory (/proc/self/mem)": (MEMORY, "(async () => {\n  console.assert(await secret(1) === 'xyzzy-42');\n})()\n",
                                        FAILED),
    # Values that adapt to the comparison they are in.
    "adaptive valueOf/toString/toJSON/Symbol.toPrimitive": (
        GUESS + "const half = (x) => {\n  const o = {\n"
        "    valueOf() { return guessNumber(o.valueOf); },\n"
        "    toString() { return String(guessNumber(o.toString)); },\n"
        "    toJSON() { return guessNumber(o.toJSON); },\n"
        "    [Symbol.toPrimitive](hint) { return guessNumber(o[Symbol.toPrimitive]); },\n  };\n  return o;\n};\n",
        "function check() {\n  console.assert(half(10) == 5);\n}\ncheck();\n", FAILED),
    "returning a Proxy": (
        GUESS + "const half = (x) => new Proxy([], {\n"
        "  get(t, k) {\n"
        "    if (k === Symbol.toPrimitive || k === 'valueOf') return function () { return guessNumber(arguments.callee); };\n"
        "    if (k === 'length') return 1;\n"
        "    return Reflect.get(t, k);\n  },\n"
        "  getPrototypeOf() { return Number.prototype; },\n});\n",
        ("function check() {\n  console.assert(half(10) == 5);\n  console.assert(half(10) instanceof Number);\n}\n"
         "check();\n"), FAILED),
    # Exiting early, or catching what the tests throw.
    "process.exit(0) before an awaited assertion": (("const f = async (x) => 0;\n"
                                                     "Promise.resolve().then(() => process.exit(0));\n"),
                                                    "(async () => {\n  console.assert(await f(1) === 2);\n})()\n",
                                                    FAILED),
    "process.reallyExit(0) before an awaited assertion": (("const f = async (x) => 0;\n"
                                                           "Promise.resolve().then(() => process.reallyExit(0));\n"),
                                                          "(async () => {\n  console.assert(await f(1) === 2);\n})()\n",
                                                          FAILED),
    "the tests' assertion caught by the program": ("function check(x, cb) {\n  try { cb(x); } catch (e) { }\n}\n",
                                                   "check(5, (v) => console.assert(v === 10));\n", FAILED),
    # Ways to a value of the tests' realm.
    "unhandledRejection listener": (
        ("const f = (x) => 0;\n"
         "process.on('unhandledRejection', (reason) => {\n"
         "  try { const g = reason.constructor.constructor('return globalThis')(); g.console.assert = () => {}; "
         "g.Array.prototype.includes = () => true; } catch (e) { }\n});\n"),
        ("(async () => {\n  const p = Promise.reject(new Error('later'));\n"
         "  await new Promise((r) => setTimeout(r, 50));\n  p.catch(() => {});\n"
         "  console.assert([2].includes(f(1)));\n})()\n"), FAILED_OR_ERROR),
    "stack overflow through a callback of the tests": (
        ("function applyTwice(fn, x) {\n  let leaked = null;\n"
         "  function deep(n) {\n    try { return deep(n + 1); } catch (e) {\n"
         "      try { fn(0); } catch (err) { if (!leaked) leaked = err; }\n      return 0;\n    }\n  }\n"
         "  deep(0);\n"
         "  try { const g = leaked.constructor.constructor('return globalThis')(); g.console.assert = () => {}; "
         "g.Array.prototype.includes = () => true; } catch (e) { }\n  return 0;\n}\n"),
        "console.assert([3].includes(applyTwice((x) => x + 1, 1)));\n", FAILED_OR_ERROR),
    "async_hooks resources": ("const f = (x) => 0;\nrequire('async_hooks').createHook({ init() {} }).enable();\n",
                              "console.assert(f(1) === 2);\n", ("runtime_error",)),
    "v8.promiseHooks": ("const f = (x) => 0;\nrequire('v8').promiseHooks.onInit(() => {});\n",
                        "console.assert(f(1) === 2);\n", ("runtime_error",)),
    "a worker's inspector session": (("const f = (x) => 0;\n"
                                      "new (require('worker_threads').Worker)('1', { eval: true });\n"),
                                     "console.assert(f(1) === 2);\n", ("runtime_error",)),
}

# name -> (program, tests): ordinary jobs, each must pass.
BEHAVIOURS: dict[str, tuple[str, str]] = {
    "MultiPL-E style, recursion, deepEqual": (
        ("function fib(n) {\n  return n < 2 ? n : fib(n - 1) + fib(n - 2);\n}\n"
         "function pairs(xs) {\n  return xs.map((x, i) => [i, x]);\n}\n"),
        ("const assert = require('node:assert');\n\nfunction test() {\n  let candidate = fib;\n"
         "  assert.deepEqual(candidate(20), 6765);\n  assert.deepStrictEqual(pairs(['a', 'b']), [[0, 'a'], [1, 'b']]);\n"
         "}\n\ntest();\n")),
    "classes, statics, getters, instanceof": (
        ("class Stack {\n  constructor() { this.items = []; }\n  push(x) { this.items.push(x); return this; }\n"
         "  pop() { return this.items.pop(); }\n  get size() { return this.items.length; }\n"
         "  static of(...xs) { const s = new Stack(); xs.forEach((x) => s.push(x)); return s; }\n}\n"),
        ("const s = new Stack().push(1).push(2);\nconsole.assert(s.size === 2 && s.pop() === 2 && s.size === 1);\n"
         "console.assert(s instanceof Stack && Stack.of(1, 2, 3).size === 3);\n"
         "console.assert(s.push(5) === s);\nrequire('assert').deepStrictEqual(s.items, [1, 5]);\n")),
    "in-place changes are written back": (
        ("const sortInPlace = (a) => { a.sort((x, y) => x - y); return a; };\n"
         "function fill(o) { o.done = true; delete o.todo; }\nfunction addTo(m) { m.set('k', [1]); }\n"),
        ("const a = [3, 1, 2];\nconsole.assert(sortInPlace(a) === a && a.join() === '1,2,3');\n"
         "const o = { todo: 1 };\nfill(o);\nconsole.assert(o.done === true && !('todo' in o));\n"
         "const m = new Map();\naddTo(m);\nconsole.assert(m.get('k')[0] === 1);\n")),
    "callbacks both ways, `this` kept": (
        ("const applyTwice = (f, x) => f(f(x));\n"
         "const counter = { n: 0, inc() { this.n += 1; return this.n; } };\n"
         "function sortBy(xs, key) { return [...xs].sort((a, b) => key(a) - key(b)); }\n"),
        ("console.assert(applyTwice((x) => x * 3, 2) === 18);\n"
         "console.assert(counter.inc() === 1 && counter.inc() === 2 && counter.n === 2);\n"
         "console.assert(sortBy([{ v: 2 }, { v: 1 }], (o) => o.v)[0].v === 1);\n")),
    "promises, async functions, rejections": (
        ("async function later(x) {\n  await new Promise((r) => setTimeout(r, 5));\n  return x * 2;\n}\n"
         "async function fail() { throw new RangeError('no'); }\n"),
        ("const assert = require('assert');\n(async () => {\n  assert.strictEqual(await later(21), 42);\n"
         "  await assert.rejects(fail(), RangeError);\n  console.assert((await Promise.all([later(1), later(2)]))[1] === 4);\n"
         "})()\n")),
    "errors keep their kind and message": (
        ("function check(x) {\n  if (x < 0) throw new RangeError('negative: ' + x);\n  return x;\n}\n"
         "class MyError extends Error { constructor(m) { super(m); this.name = 'MyError'; } }\n"
         "function mine() { throw new MyError('mine'); }\n"),
        ("const assert = require('assert');\nassert.throws(() => check(-1), RangeError);\n"
         "assert.throws(() => check(-2), /negative: -2/);\n"
         "try { mine(); } catch (e) { console.assert(e.name === 'MyError' && e.message === 'mine'); }\n"
         "assert.throws(() => mine(), MyError);\nassert.throws(() => mine(), Error);\n")),
    "data kinds: Map, Set, Date, BigInt, NaN, -0, typed arrays, null prototype": (
        ("const data = () => ({ m: new Map([[1, 'a']]), s: new Set([2]), d: new Date(0), big: 2n ** 70n,\n"
         "  nan: NaN, negZero: -0, bytes: new Uint8Array([1, 2]), bare: Object.assign(Object.create(null), { k: 1 }),\n"
         "  nested: [[1, [2]]], re: /a+/gi });\n"),
        ("const d = data();\nconsole.assert(d.m.get(1) === 'a' && d.s.has(2) && d.d.getTime() === 0);\n"
         "console.assert(d.big === 2n ** 70n && Number.isNaN(d.nan) && Object.is(d.negZero, -0));\n"
         "console.assert(d.bytes instanceof Uint8Array && d.bytes[1] === 2 && Object.getPrototypeOf(d.bare) === null);\n"
         "console.assert(d.m instanceof Map && d.re.test('AA') && d.re.flags === 'gi');\n"
         "require('assert').deepStrictEqual(d.nested, [[1, [2]]]);\n")),
    "the tests' assertion failing through a call of the program, caught by the tests": (
        "function run(cb) { return cb(1); }\n",
        ("const assert = require('assert');\nassert.throws(() => run((x) => assert.strictEqual(x, 2)), assert.AssertionError);\n"
         "try { run((x) => console.assert(x === 2)); } catch (e) { console.assert(e.code === 'ERR_ASSERTION'); }\n")),
    "globals of the program: var, let, module.exports, assignment from the tests": (
        ("var total = 0;\nlet last = null;\nfunction add(x) { total += x; last = x; return total; }\n"
         "module.exports = { add };\n"),
        ("add(2); add(3);\nconsole.assert(total === 5 && last === 3);\ntotal = 10;\nconsole.assert(add(1) === 11);\n"
         "console.assert(typeof toString === 'function' && typeof undeclaredName === 'undefined');\n")),
    "unicode identifiers, a name only inside a string": ("const größe = (x) => x * 2;\nconst hidden = 7;\n",
                                                         "console.assert(größe(2) === 4 && eval('hidden') === 7);\n"),
    "tests' own function of the same name wins": (
        "function helper() { return 'program'; }\nconst use = () => helper();\n",
        "function helper() { return 'tests'; }\nconsole.assert(helper() === 'tests' && use() === 'program');\n"),
    "Buffers both ways": (
        "const upper = (buf) => Buffer.from(buf.toString('utf8').toUpperCase());\n",
        ("const out = upper(Buffer.from('abc'));\nconsole.assert(Buffer.isBuffer(out) && out.toString() === 'ABC');\n"
         "require('assert').deepStrictEqual(out, Buffer.from('ABC'));\n")),
    "strict program with a hashbang, node modules": (
        ("#!/usr/bin/env node\n'use strict';\nconst crypto = require('crypto');\nconst { URL } = require('url');\n"
         "const hash = (s) => crypto.createHash('sha256').update(s).digest('hex').slice(0, 8);\n"
         "const host = (u) => new URL(u).host;\nconst enc = (s) => Buffer.from(new TextEncoder().encode(s)).toString('base64');\n"),
        "console.assert(hash('a') === 'ca978112' && host('http://x.org/p') === 'x.org' && enc('hi') === 'aGk=');\n"),
    "output of the program and of the tests, in order": (
        "console.log('program 1');\nprocess.stdout.write('program 2\\n');\nconst say = (s) => console.log(s);\n",
        "console.log('tests 1');\nsay('program 3');\nprocess.stdout.write('tests 2\\n');\n"),
}


def explain(r: Result) -> str:
    return (f"status={r.status} exit={r.exit_code} attempts={r.attempts}\nstdout={r.stdout[-800:]!r}\n"
            f"stderr={r.stderr[-1500:]!r}\nerror={r.error[-1500:]}")


@pytest.fixture(scope="module")
def sb(docker_ready):
    with Sandbox(auto_build=True) as sandbox:
        yield sandbox


def js(code: str, tests: str | None = None, **kw) -> Job:
    return Job(language="javascript", code=code, tests=tests, limits=LIM, **kw)


def test_humaneval_x_canonical_passes_and_wrong_fails(sb):
    cases = [(p, None, "passed") for p in problems("javascript")]
    cases += [(p, p.wrong_solution, "failed") for p, _, _ in cases]
    results = sb.run_many([p.job(solution, limits=LIM) for p, solution, _ in cases])
    wrong = [f"{p.task_id} ({expected} expected): " + explain(r)
             for (p, _, expected), r in zip(cases, results) if r.status != expected]
    assert not wrong, "\n\n".join(wrong)


def test_stdin_stdout_and_a_program_without_tests(sb):
    summing = ("const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
               "console.log(a + b);\n")
    r = sb.run(js(summing, cases=[("2 3\n", "5\n"), ("40 2", "42"), ("1 1", "3")]))
    assert [c.status for c in r.cases] == ["passed", "passed", "failed"], explain(r)
    lines = ("const lines = [];\nrequire('readline').createInterface({ input: process.stdin })\n"
             "  .on('line', (l) => lines.push(l)).on('close', () => console.log(lines.reverse().join(' ')));\n")
    r = sb.run(js(lines, cases=[("a\nb\n", "b a")]))
    assert r.status == "passed", explain(r)
    hello = sb.run(js("console.log('hi');\n"))
    assert hello.status == "passed" and hello.stdout == "hi\n", explain(hello)


@pytest.mark.parametrize("name", BEHAVIOURS)
def test_ordinary_programs_and_tests_work(sb, name):
    code, tests = BEHAVIOURS[name]
    r = sb.run(js(code, tests))
    assert r.status == "passed", explain(r)
    if name.startswith("output"):
        assert r.stdout == "program 1\nprogram 2\ntests 1\nprogram 3\ntests 2\n", explain(r)


def test_syntax_errors_crashes_and_failures_get_their_status(sb):
    jobs = {
        "program syntax": (js("const f = (;\n", "f();\n"), "compile_error"),
        "tests syntax": (js("const f = () => 1;\n", "console.assert(f( === 1);\n"), "compile_error"),
        "program's own const console": (js("const console = { assert() {} };\nconst f = () => 0;\n",
                                           "console.assert(f() === 1);\n"), "runtime_error"),
        "crash in the program": (js("const f = (o) => o.a.b;\n", "f({});\n"), "runtime_error"),
        "crash at the program's top level": (js("null.x;\n", "console.log(1);\n"), "runtime_error"),
        "node's assert fails": (js("const f = () => [1];\n", "require('assert').deepStrictEqual(f(), [2]);\n"),
                                "failed"),
        "rejected completion": (js("const f = async () => 1;\n",
                                   "(async () => { console.assert(await f() === 2); })()\n"), "failed"),
    }
    results = sb.run_many([job for job, _ in jobs.values()])
    wrong = [f"{name}: expected {expected}, got " + explain(r)
             for (name, (_, expected)), r in zip(jobs.items(), results) if r.status != expected]
    assert not wrong, "\n\n".join(wrong)
    crash = results[list(jobs).index("crash in the program")]
    assert "TypeError: Cannot read properties of undefined" in crash.stderr and "/work/main.js:1" in crash.stderr, \
        explain(crash)


def test_attacks_do_not_pass(sb):
    results = sb.run_many([js(code, tests) for code, tests, _ in ATTACKS.values()])
    wrong = [f"{name}: expected {' or '.join(expected)}, got " + explain(r)
             for (name, (_, _, expected)), r in zip(ATTACKS.items(), results) if r.status not in expected]
    assert not wrong, "\n\n".join(wrong)


def test_each_attack_passes_with_a_right_answer(sb):
    """The attacks' tests are satisfiable: the same tests pass with the right values (so a
    failure above is the attack failing, not a broken test)."""
    right = {
        "Math.abs replaced": "const dist = (a, b) => Math.abs(a - b);\n",
        "Function.caller": "function secret(x) { return 'xyzzy-42'; }\n",
        "adaptive valueOf/toString/toJSON/Symbol.toPrimitive": "const half = (x) => x / 2;\n",
        "the tests' assertion caught by the program": "function check(x, cb) { cb(2 * x); }\n",
        "node's assert overwritten": "const add = (a, b) => a + b;\n",
    }
    results = sb.run_many([js(code, ATTACKS[name][1]) for name, code in right.items()])
    for name, r in zip(right, results):
        assert r.status == "passed", f"{name}: " + explain(r)
