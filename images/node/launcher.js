'use strict';
// Runs a JavaScript job and proves that its tests ran to their end: one node process, three
// realms.
//
// An exit code of 0 can be forged (process.exit(0) in the middle of the tests), so the
// server hands the job a one-time nonce on fd 4, which this file reads before any code of
// the program exists and writes back on fd 3 only when the tests script finished without
// throwing (and, when its completion value is a Promise, once that Promise fulfilled).
// The program and the tests come on pipes (fd 5, fd 6), read to their end first as well
// and closed; they are not files anywhere.
//
// Realms. This launcher is the main realm. The program runs in vm context A, with its own
// intrinsics; the tests run in vm context B, another realm the program never gets a
// reference to. The tests see the program through a membrane (membrane*.js, which run
// in B): its data arrives as B-realm deep copies (primitives, arrays, plain objects of
// data, Map, Set, Date, RegExp, typed arrays, Buffers), its functions and its other
// objects (class instances, objects with methods) as B proxies whose every call or
// property read converts again, its Promises as B Promises, its errors as B errors of the
// same name and message. The program's top-level bindings that the tests name become
// accessors of B's global object. What the tests hand to the program goes the other way
// (copies; A-realm wrapper functions for their functions), and arrays, objects, maps and
// sets passed to a program function get its in-place changes written back after the call.
// So the program can replace anything of its own realm (Math.abs, Function.prototype.call,
// Promise, Symbol.hasInstance...): the tests use B's intrinsics, reach B's own
// Function.prototype and Object.prototype methods even on the program's values, and never
// run a function of the program with a B value in reach. B has its own console (assert
// throws, as test frameworks' asserts do), require (node's assert, assert/strict and
// util, frozen; any other module through the membrane, as a value of the program's
// realm), timers, process (exit, exitCode, argv, stdout/stderr, nextTick its own) and
// node's Buffer, URL, TextEncoder/TextDecoder, atob/btoa (frozen). An assertion of the
// tests that fails inside a call of the program (which could catch it) fails the run.
//
// Files. This one reads the inputs, runs the program and the tests, writes the marker and
// exits; the rest of the launcher is in the files beside it:
//   lockdown.js        the main realm, locked down before the program runs
//   names.js           the names the tests take from the program; the program's wrapper
//   realm-program.js   realm A: bridgeA (run in A), the program's globals and parameters
//   membrane.js        the membrane, in B: what it captured, its tables, caches and helpers
//   membrane-to-a.js   the membrane, in B: the tests' values as the program sees them
//   membrane-to-b.js   the membrane, in B: the program's values as the tests see them
//   realm-tests.js     realm B: what it has of its own (console, require, timers, process)
// None is a node module: a module's object stays in node's require cache, which the program
// reaches (require('module')._cache, module.children). This file reads them all, with
// fs.readFileSync, before any code of the program exists. Each is a script whose value is
// one function: those of the main realm are evaluated at once, those of B when B is made
// (their sources kept until then); this file calls each function once and keeps what it
// returns in its own variables, which nothing else reaches.
//
// Usage: node launcher.js [--sandbox-fds] WORKDIR PROGRAM [TESTS]; --sandbox-fds says
// that fds 3 and 4 are the server's (elsewhere they may be node's own pipes), and that the
// scripts come on pipes (fd 5: the program, fd 6: the tests), PROGRAM and TESTS being only
// their names in messages.

// ------------------------------------------------------------------- primordials
// Everything the launcher calls after the program started, captured before.
const ReflectApply = Reflect.apply;
const ReflectDefineProperty = Reflect.defineProperty;
const ReflectGet = Reflect.get;
const ReflectGetOwnPropertyDescriptor = Reflect.getOwnPropertyDescriptor;
const ReflectGetPrototypeOf = Reflect.getPrototypeOf;
const ObjectCreate = Object.create;
const ObjectFreeze = Object.freeze;
const StringCtor = String;
const StringPrototypeIndexOf = String.prototype.indexOf;
const StringPrototypeSlice = String.prototype.slice;
const StringPrototypeStartsWith = String.prototype.startsWith;
const TypedArrayLength = ReflectGetOwnPropertyDescriptor(ReflectGetPrototypeOf(Uint8Array.prototype), 'length').get;
const Uint8ArrayCtor = Uint8Array;

const fs = require('fs');
const vm = require('vm');
const path = require('path');
const util = require('util');
const { createRequire } = require('module');

const fsReadSync = fs.readSync;
const fsWriteSync = fs.writeSync;
const utilFormat = util.format;
const utilInspect = util.inspect;
const types = util.types;
const isNativeError = types.isNativeError;
const isPromise = types.isPromise;
const reallyExit = process.reallyExit.bind(process);   // process.exit would run the program's listeners first
const hrtime = process.hrtime;
const textEncoder = new util.TextEncoder();
const TextEncoderEncode = util.TextEncoder.prototype.encode;
const textDecoder = new util.TextDecoder();
const TextDecoderDecode = util.TextDecoder.prototype.decode;
const VmScript = vm.Script;
const ScriptRunInContext = vm.Script.prototype.runInContext;
const RUN_OPTIONS = ObjectFreeze({ __proto__: null, displayErrors: false });   // no source excerpts of ours in stacks
const TIMERS = { setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate };

// What the launcher's other files get of these.
const primordials = ObjectFreeze({
  __proto__: null, ReflectApply, ReflectDefineProperty, ReflectGetOwnPropertyDescriptor, ReflectGetPrototypeOf,
  ObjectCreate, ObjectFreeze, StringCtor, StringPrototypeSlice, StringPrototypeStartsWith, VmScript,
});

const SYNTAX_ERROR_EXIT = 3;
const sandboxFds = process.argv[2] === '--sandbox-fds';
const [workDir, programPath, testsPath] = process.argv.slice(sandboxFds ? 3 : 2);

// node's globals the tests get too (frozen): what tests use to compute expected values.
const NODE_GLOBALS = ['Buffer', 'URL', 'URLSearchParams', 'TextEncoder', 'TextDecoder', 'atob', 'btoa'];

// ------------------------------------------------------------------- the launcher's files
// All read now, before any code of the program exists (see the top of this file).
function ownPath(name) {
  return path.join(__dirname, name);
}

// A file of the main realm, evaluated here: its value, a function.
function mainFile(name) {
  const file = ownPath(name);
  return new VmScript(fs.readFileSync(file, 'utf8'), { filename: file }).runInThisContext();
}

// A file of B: its source, evaluated in B when B is made (see bridgeB).
function bFile(name) {
  const source = fs.readFileSync(ownPath(name), 'utf8');
  return ObjectFreeze({ __proto__: null, source, filename: `proctor-bridge-b/${name}` });
}

// The files of the main realm, whose frames say nothing about the job (see lineHidden).
const OWN_FILES = ObjectFreeze([__filename, ownPath('lockdown.js'), ownPath('names.js'), ownPath('realm-program.js')]);
const { lockDown, ERROR_NAMES } = mainFile('lockdown.js')(require, primordials, onUncaught, NODE_GLOBALS);
const { RESERVED, testNames, wrapProgram } = mainFile('names.js')();
const { createRealmA, programAliases } = mainFile('realm-program.js')(require, primordials, RESERVED);
const MEMBRANE = bFile('membrane.js');
const MEMBRANE_TO_A = bFile('membrane-to-a.js');
const MEMBRANE_TO_B = bFile('membrane-to-b.js');
const REALM_TESTS = bFile('realm-tests.js');

// ------------------------------------------------------------------- inputs
// /dev/urandom costs a read; the crypto module costs 6 ms to load.
function randomBytes(length) {
  const bytes = new Uint8ArrayCtor(length);
  try {
    const fd = fs.openSync('/dev/urandom', 'r');
    let n = 0;
    while (n < length) n += fsReadSync(fd, bytes, n, length - n, null);
    fs.closeSync(fd);
  } catch (e) {
    require('crypto').randomFillSync(bytes);
  }
  return bytes;
}

// The nonce, masked with random bytes, lives only in this closure.
function readNonce() {
  const raw = new Uint8ArrayCtor(128);
  let length = 0;
  try {
    if (!sandboxFds) return { mask: new Uint8ArrayCtor(0), masked: new Uint8ArrayCtor(0) };
    for (;;) {
      const n = fsReadSync(4, raw, length, raw.length - length, null);
      if (n <= 0 || length + n > raw.length) break;
      length += n;
    }
    fs.closeSync(4);
  } catch (e) {
    length = 0;
  }
  const mask = randomBytes(length);
  const masked = new Uint8ArrayCtor(length);
  for (let i = 0; i < length; i++) masked[i] = raw[i] ^ mask[i];
  raw.fill(0);
  return { mask, masked };
}

const nonce = readNonce();
const nonceLength = nonce.masked.length;
let markerWritten = false;

function readSource(file, fd) {
  if (!sandboxFds) return fs.readFileSync(file, 'utf8');
  const source = fs.readFileSync(fd, 'utf8');
  fs.closeSync(fd);   // /proc/self/fd/N then names nothing
  return source;
}

// ------------------------------------------------------------------- output, exit
// Node writes to a pipe asynchronously once the pipe is full, and an exit drops what
// is still queued: blocking writes keep every byte (and make a flood meet the cap). The
// streams are made when first used (making them costs 4 ms), so blocking is set then.
function setBlocking(stream) {
  const handle = stream._handle;
  if (handle && typeof handle.setBlocking === 'function') handle.setBlocking(true);
}

function blockingOutput() {
  for (const name of ['stdout', 'stderr']) {
    const desc = Object.getOwnPropertyDescriptor(process, name);
    if (desc === undefined || typeof desc.get !== 'function' || !desc.configurable) {
      setBlocking(process[name]);
      continue;
    }
    const get = desc.get;
    let made = false;
    Object.defineProperty(process, name, {
      get: function stream() {
        const value = ReflectApply(get, this, []);
        if (!made) {
          made = true;
          setBlocking(value);
        }
        return value;
      },
      set: desc.set,
      enumerable: desc.enumerable,
      configurable: true,
    });
  }
}

function writeAll(fd, text) {
  let bytes;
  try {
    bytes = ReflectApply(TextEncoderEncode, textEncoder, [text]);
  } catch (e) {
    return;
  }
  const length = ReflectApply(TypedArrayLength, bytes, []);
  let offset = 0;
  let again = 0;
  while (offset < length) {
    let n;
    try {
      n = fsWriteSync(fd, bytes, offset, length - offset);
    } catch (e) {
      // EAGAIN: the program made the pipe non-blocking; anything else: the fd is gone.
      if (again++ < 100000 && ReflectGet(e, 'code') === 'EAGAIN') continue;
      return;
    }
    offset += n;
  }
}

function writeMarker() {
  if (markerWritten || nonceLength === 0) return;   // no nonce: fd 3 is not ours
  markerWritten = true;
  const out = new Uint8ArrayCtor(nonceLength);
  for (let i = 0; i < nonceLength; i++) out[i] = nonce.masked[i] ^ nonce.mask[i];
  try {
    fsWriteSync(3, out, 0, nonceLength);
  } catch (e) {
    // fd 3 closed by the program: no marker, the run fails
  }
  for (let i = 0; i < nonceLength; i++) out[i] = 0;
}

function lineHidden(line) {
  // Frames of this launcher, of the membrane and of node's loader say nothing about the job.
  let i = 0;
  while (i < line.length && (line[i] === ' ' || line[i] === '\t')) i++;
  if (!ReflectApply(StringPrototypeStartsWith, line, ['at ', i])) return false;
  for (let j = 0; j < OWN_FILES.length; j++) {
    if (ReflectApply(StringPrototypeIndexOf, line, [OWN_FILES[j]]) !== -1) return true;
  }
  const hidden = ['proctor-bridge', 'node:vm', 'node:internal/'];
  for (let j = 0; j < hidden.length; j++) {
    if (ReflectApply(StringPrototypeIndexOf, line, [hidden[j]]) !== -1) return true;
  }
  return false;
}

function dropFrames(text) {
  const lines = [];
  let start = 0;
  for (;;) {
    const end = ReflectApply(StringPrototypeIndexOf, text, ['\n', start]);
    lines[lines.length] = ReflectApply(StringPrototypeSlice, text, [start, end === -1 ? text.length : end]);
    if (end === -1) break;
    start = end + 1;
  }
  let first = 0;
  for (let j = 0; j < OWN_FILES.length; j++) {
    if (!ReflectApply(StringPrototypeStartsWith, lines[0], [`${OWN_FILES[j]}:`])) continue;
    // node's source excerpt of a line of this launcher: skip it
    while (first < lines.length && lines[first] !== '') first++;
    first++;
    break;
  }
  let out = '';
  for (let i = first; i < lines.length; i++) {
    if (lineHidden(lines[i])) continue;
    out = out === '' && i === first ? lines[i] : `${out}\n${lines[i]}`;
  }
  return out;
}

function describe(error) {
  if ((typeof error === 'object' && error !== null) || typeof error === 'function') {
    let stack;
    try {
      stack = ReflectGet(error, 'stack');
    } catch (e) {
      stack = undefined;
    }
    if (typeof stack === 'string' && isNativeError(error)) return dropFrames(stack);
    let shown;
    try {
      shown = utilInspect(error);
    } catch (e) {
      shown = '[object]';
    }
    return `Uncaught ${shown}`;
  }
  return `Uncaught ${StringCtor(error)}`;
}

// Print an uncaught error as node would, without this launcher's frames, and exit.
function die(error, status) {
  let text;
  try {
    text = describe(error);
  } catch (e) {
    text = 'Uncaught exception (it could not be printed)';
  }
  writeAll(2, `${text}\n`);
  reallyExit(status);
}

function onUncaught(error) {
  die(error, 1);
}

// ------------------------------------------------------------------- syntax
function parse(source, file) {
  try {
    return new VmScript(source, { filename: file });
  } catch (error) {
    if (!isNativeError(error) || error.name !== 'SyntaxError') throw error;
    return die(error, SYNTAX_ERROR_EXIT);
  }
}

// ------------------------------------------------------------------- realm B: the tests
// The membrane and what B has of its own (the B files, see the top of this file), evaluated
// in B before the program runs, in this order: each file's function gets what the ones
// before it returned; the last returns the functions the launcher calls later.
function evaluateInB(file, contextB) {
  return new VmScript(file.source, { filename: file.filename }).runInContext(contextB);
}

function bridgeB(contextB, host) {
  const membrane = evaluateInB(MEMBRANE, contextB)(host);
  const towardA = evaluateInB(MEMBRANE_TO_A, contextB)(membrane);
  const towardB = evaluateInB(MEMBRANE_TO_B, contextB)(membrane, towardA);
  return evaluateInB(REALM_TESTS, contextB)(host, membrane, towardA, towardB);
}

// ------------------------------------------------------------------- main
function main() {
  blockingOutput();
  const program = readSource(programPath, 5);
  const tests = testsPath === undefined ? undefined : readSource(testsPath, 6);
  parse(program, programPath);   // script syntax, before anything runs
  const testsScript = tests === undefined ? undefined : parse(tests, testsPath);
  const argv0 = process.argv[0];
  process.argv = [argv0, programPath];
  process.chdir(workDir);

  // Realm A (see realm-program.js).
  const realm = createRealmA(workDir, programPath);
  const { contextA, realmA, intrinsicNames, globalA, consoleA } = realm;

  // Realm B, and the membrane.
  let bridge;
  let runTests;
  let names = [];
  let testsExitCode = 0;
  if (testsScript !== undefined) {
    const contextB = vm.createContext(ObjectCreate(null), { name: 'tests' });
    const mainIntrinsics = { __proto__: null };
    for (const name of ['Object', 'Function', 'Array', 'Map', 'Set', 'Date', 'RegExp', 'Promise', 'ArrayBuffer',
      ...ERROR_NAMES, 'Int8Array', 'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array', 'Int32Array',
      'Uint32Array', 'Float32Array', 'Float64Array', 'BigInt64Array', 'BigUint64Array']) {
      mainIntrinsics[name] = globalThis[name];
    }
    const trusted = [];
    for (const id of ['assert', 'assert/strict', 'util']) trusted.push(id, require(id), `node:${id}`, require(id));
    const host = {
      __proto__: null,
      types,
      format: utilFormat,
      inspect: utilInspect,
      write: writeAll,
      exit: reallyExit,
      uncaught: onUncaught,
      exitCode(code) {
        testsExitCode = code;
        if (code !== 0 && markerWritten) reallyExit(code);   // set after the end: node would exit with it
      },
      require: createRequire(path.join(workDir, 'tests.js')),
      fire(callback, args) {
        return function fire() {
          try {
            ReflectApply(callback, undefined, args);
          } catch (error) {
            onUncaught(error);
          }
        };
      },
      now() {
        const t = hrtime();
        return t[0] * 1e3 + t[1] / 1e6;
      },
      decode(bytes) {
        return ReflectApply(TextDecoderDecode, textDecoder, [bytes]);
      },
      timers: TIMERS,
      process,
      argv0,
      testsPath,
      trusted,
      realmA,
      mainObjectPrototype: Object.prototype,
      Buffer,
      nodeGlobals: NODE_GLOBALS.flatMap((name) => [name, globalThis[name]]),
      mainIntrinsics,
    };
    bridge = bridgeB(contextB, host);
    names = testNames(tests, bridge.globalNames);
    runTests = () => ReflectApply(ScriptRunInContext, testsScript, [contextB, RUN_OPTIONS]);
  }

  // The program, as a function body (see realm-program.js).
  const { aliases, aliasValues } = programAliases(realm);
  let outer;
  try {
    outer = new VmScript(wrapProgram(program, aliases, names), { filename: programPath, lineOffset: -1 })
      .runInContext(contextA);
  } catch (error) {
    die(error, 1);   // `let console` and the like: an error of the program, not of its syntax
  }
  const body = outer(...aliasValues);
  const { importNames, whenSettled, swallowedAssertion } = bridge === undefined ? {} : bridge;

  lockDown(intrinsicNames);

  // ---- the program runs: from here on, captured functions only
  let access;
  try {
    access = ReflectApply(body, globalA, [consoleA]);
  } catch (error) {
    die(error, 1);
  }
  if (bridge === undefined) {
    writeMarker();   // a program without tests ran to its end
    return;
  }
  importNames(access, names);
  let result;
  try {
    result = runTests();
  } catch (error) {
    die(error, 1);
  }
  // The marker says the tests ran to their end, the program swallowed no assertion of
  // theirs, and they asked for no failing exit code.
  const finish = () => {
    const swallowed = swallowedAssertion();
    if (swallowed !== undefined) die(swallowed, 1);
    if (testsExitCode !== 0) reallyExit(testsExitCode);
    writeMarker();
  };
  if (isPromise(result)) {
    // Asynchronous tests: the marker waits for the Promise the script ended with.
    whenSettled(result, finish, (error) => die(error, 1));
  } else {
    finish();
  }
}

main();
