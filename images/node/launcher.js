'use strict';
// Runs a JavaScript job and proves that its tests ran to their end.
//
// An exit code of 0 can be forged: process.exit(0) in the middle of the tests stops
// them and still "passes". So the server hands the program a one-time nonce on fd 4,
// which this file reads before any code of the program runs, and writes back on fd 3
// only when the tests script finished without throwing (and, when its last
// expression is a Promise, once that Promise fulfilled). The nonce lives only in
// this closure, masked with random bytes; the ways a program could reach into the
// closure (the inspector, heap snapshots, V8 flags, native addons) are closed first.
//
// The program and its tests run as two scripts in the global scope (not modules):
// top-level declarations of the program are visible to the tests, and neither can
// break the other's syntax. console.assert throws, as test frameworks' asserts do;
// console, JSON and the assert module are frozen so that the program cannot disarm
// the tests' checks. Both scripts are parsed before either runs: a syntax error
// exits with status 3 (the host reports compile_error). Usage:
// node launcher.js [--sandbox-fds] WORKDIR PROGRAM [TESTS]; --sandbox-fds says that
// fds 3 and 4 are the server's (elsewhere they may be node's own pipes), and that the
// scripts come on pipes (fd 5: the program, fd 6: the tests), read to their end
// before any code runs, PROGRAM and TESTS being only their names in messages.
const fs = require('fs');
const vm = require('vm');
const path = require('path');
const crypto = require('crypto');
const assert = require('assert');
const { createRequire } = require('module');

const writeSync = fs.writeSync;
const sandboxFds = process.argv[2] === '--sandbox-fds';
const [workDir, programPath, testsPath] = process.argv.slice(sandboxFds ? 3 : 2);

function readNonce() {
  const raw = Buffer.alloc(128);
  let length = 0;
  try {
    if (!sandboxFds) return { mask: Buffer.alloc(0), masked: Buffer.alloc(0) };
    for (;;) {
      const n = fs.readSync(4, raw, length, raw.length - length, null);
      if (n <= 0 || length + n > raw.length) break;
      length += n;
    }
    fs.closeSync(4);
  } catch (e) {
    length = 0;
  }
  const mask = crypto.randomBytes(length);
  const masked = Buffer.alloc(length);
  for (let i = 0; i < length; i++) masked[i] = raw[i] ^ mask[i];
  raw.fill(0);
  return { mask, masked };
}

const nonce = readNonce();

function writeMarker() {
  if (nonce.masked.length === 0) return;   // no nonce: fd 3 is not ours
  const out = Buffer.alloc(nonce.masked.length);
  for (let i = 0; i < out.length; i++) out[i] = nonce.masked[i] ^ nonce.mask[i];
  try {
    writeSync(3, out);
  } catch (e) {
    // fd 3 closed by the program: no marker, the run fails
  }
}

function refuse(what) {
  return function () {
    throw new Error(`${what} is not available in the sandbox`);
  };
}

function lockDown() {
  const inspector = require('inspector');
  for (const key of ['open', 'url', 'waitForDebugger', 'Session']) {
    Object.defineProperty(inspector, key, { value: refuse(`inspector.${key}`), writable: false, configurable: false });
  }
  Object.freeze(inspector);
  const v8 = require('v8');
  for (const key of ['getHeapSnapshot', 'writeHeapSnapshot', 'setFlagsFromString']) {
    Object.defineProperty(v8, key, { value: refuse(`v8.${key}`), writable: false, configurable: false });
  }
  Object.freeze(v8);
  for (const key of ['binding', '_linkedBinding', 'dlopen', '_debugProcess', '_debugEnd', '_startProfilerIdleNotifier']) {
    Object.defineProperty(process, key, { value: refuse(`process.${key}`), writable: false, configurable: false });
  }
  // A SIGUSR1 listener replaces Node's own handler, which would start the inspector.
  process.on('SIGUSR1', () => {});
  const console = globalThis.console;
  Object.defineProperty(console, 'assert', {
    value: function assertTrue(value, ...message) {
      if (!value) {
        const text = ['Assertion failed', ...message].join(' ');
        throw new assert.AssertionError({ message: text, actual: value, expected: true, operator: '==', stackStartFn: assertTrue });
      }
    },
    writable: false, configurable: false,
  });
  // Non-configurable globals: a script's own `const console` is then a SyntaxError.
  for (const key of ['console', 'JSON']) {
    Object.defineProperty(globalThis, key, { value: globalThis[key], writable: false, configurable: false });
  }
  Object.freeze(JSON);
  Object.freeze(assert);
  Object.freeze(assert.strict);
  Object.freeze(require('assert/strict'));
}

const SYNTAX_ERROR_EXIT = 3;
const reallyExit = process.reallyExit.bind(process);

// Print an uncaught error as node would, without this launcher's frames, and exit.
function die(error, status) {
  let text = error instanceof Error ? String(error.stack || error) : `Uncaught ${String(error)}`;
  // Frames of this launcher and of node's own loader say nothing about the program.
  const ours = (line) => /^\s+at /.test(line) && (line.includes(__filename) || /\(?node:(vm|internal\/)/.test(line));
  let lines = text.split('\n');
  if (lines[0].startsWith(`${__filename}:`)) lines = lines.slice(lines.indexOf('') + 1);   // source excerpt of ours
  text = lines.filter((line) => !ours(line)).join('\n');
  try {
    writeSync(2, `${text}\n`);
  } catch (e) {
    // stderr closed by the program
  }
  reallyExit(status);
}

function parse(file, fd) {
  const source = fs.readFileSync(sandboxFds ? fd : file, 'utf8');
  try {
    return new vm.Script(source, { filename: file });
  } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    return die(error, SYNTAX_ERROR_EXIT);
  }
}

// Node writes to a pipe asynchronously once the pipe is full, and an exit drops what
// is still queued: blocking writes keep every byte (and make a flood meet the cap).
function blockingOutput() {
  for (const stream of [process.stdout, process.stderr]) {
    if (stream._handle && typeof stream._handle.setBlocking === 'function') stream._handle.setBlocking(true);
  }
}

function main() {
  blockingOutput();
  const scripts = [];
  for (const [file, fd] of [[programPath, 5], [testsPath, 6]]) {
    if (file !== undefined) scripts.push(parse(file, fd));
  }
  lockDown();
  globalThis.require = createRequire(path.join(workDir, 'main.js'));
  process.chdir(workDir);
  let result;
  try {
    for (const script of scripts) result = script.runInThisContext();
  } catch (error) {
    die(error, 1);
  }
  // The marker says the last script (the tests, or a program without tests) ran to its end.
  if (result instanceof Promise) {
    // Asynchronous tests: the marker waits for the Promise the script ended with.
    Promise.prototype.then.call(result, writeMarker, (error) => die(error, 1));
  } else {
    writeMarker();
  }
}

main();
