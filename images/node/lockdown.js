// The main realm, locked down before the program runs. Not a node module (see launcher.js,
// "Files"): launcher.js evaluates this file before any code of the program exists, calls the
// function it holds once, and keeps what that returns.
//
// The main realm. The program can reach it (Buffer, require('fs'), `this` of a timer
// callback...). Node's internals use their primordials; this launcher, after the program
// started, only functions it captured before (index loops, no iteration or method lookups
// on values); and the main realm's intrinsics are frozen (with override-mistake accessors
// for constructor/toString/valueOf/name/message, so that node can still name its errors).
// Refused: the inspector (worker threads too: a worker's inspector session can attach to
// this thread), heap snapshots, V8 flags, promise hooks, async hooks, process.binding and
// native addons, and under gVisor (where node is dumpable) descriptors of the process's
// own memory. Uncaught errors go to this launcher's capture callback, and process.emit
// drops the events that would hand a value of the tests to a listener of the program
// (unhandledRejection and the like): such an error ends the run, as it would in node.
(function lockdown(require, primordials, onUncaught, NODE_GLOBALS) {
  'use strict';
  const { ReflectApply, ReflectDefineProperty, ReflectGetOwnPropertyDescriptor, ReflectGetPrototypeOf, ObjectFreeze,
    StringCtor, StringPrototypeSlice, StringPrototypeStartsWith } = primordials;
  const fs = require('fs');
  const vm = require('vm');

  function refuse(what) {
    return function refused() {
      throw new Error(`${what} is not available in the sandbox`);
    };
  }

  function replace(object, keys, prefix) {
    for (const key of keys) {
      Object.defineProperty(object, key, { value: refuse(`${prefix}.${key}`), writable: false, configurable: false });
    }
  }

  function isObjectLike(value) {
    return (typeof value === 'object' && value !== null) || typeof value === 'function';
  }

  // Freeze `root` and what its properties and prototypes reach. A method (a function without
  // a prototype property) is frozen without a walk: it has only its name and length.
  function deepFreeze(root, done) {
    const stack = [root];
    const hasOwn = Object.prototype.hasOwnProperty;
    while (stack.length > 0) {
      const object = stack.pop();
      if (done.has(object) || object === globalThis) continue;
      done.add(object);
      Object.freeze(object);
      const proto = Object.getPrototypeOf(object);
      if (proto !== null) stack.push(proto);
      const keys = Reflect.ownKeys(object);
      for (let i = 0; i < keys.length; i++) {
        const desc = Reflect.getOwnPropertyDescriptor(object, keys[i]);
        const value = desc.value;
        if (typeof value === 'function' && !hasOwn.call(value, 'prototype')
          && Object.getPrototypeOf(value) === Function.prototype) {
          if (!done.has(value)) {
            done.add(value);
            Object.freeze(value);
          }
        } else if (isObjectLike(value)) {
          stack.push(value);
        }
        if (desc.get !== undefined) stack.push(desc.get);
        if (desc.set !== undefined) stack.push(desc.set);
      }
    }
  }

  // A frozen prototype's data property cannot be overridden by assignment on an object that
  // inherits it (the "override mistake"): node assigns err.name, err.message, obj.toString.
  // An accessor keeps the inherited value and lets assignment define an own property.
  function overridable(object, key) {
    const desc = Reflect.getOwnPropertyDescriptor(object, key);
    if (desc === undefined || !('value' in desc) || !desc.writable) return;
    const value = desc.value;
    Object.defineProperty(object, key, {
      get: function get() { return value; },
      set: function set(v) {
        if (typeof this !== 'object' && typeof this !== 'function') return;   // a primitive: nothing to set
        if (this === object) throw new TypeError(`Cannot assign to read only property '${StringCtor(key)}' of object`);
        ReflectDefineProperty(this, key, { __proto__: null, value: v, writable: true, enumerable: true, configurable: true });
      },
      enumerable: desc.enumerable,
      configurable: false,
    });
  }

  const ERROR_NAMES = ['Error', 'TypeError', 'RangeError', 'SyntaxError', 'ReferenceError', 'EvalError', 'URIError',
    'AggregateError'];

  function freezeIntrinsics(names, done) {
    for (const key of ['constructor', 'toString', 'valueOf', 'toLocaleString']) overridable(Object.prototype, key);
    overridable(Function.prototype, 'toString');
    for (const name of ERROR_NAMES) {
      for (const key of ['constructor', 'name', 'message', 'toString']) overridable(globalThis[name].prototype, key);
    }
    // node calls the main realm's Error.prepareStackTrace for errors of any realm
    Object.defineProperty(Error, 'prepareStackTrace', { value: undefined, writable: false, configurable: false });
    const hidden = [
      function* generator() {}, async function asyncFunction() {}, async function* asyncGenerator() {},
      [][Symbol.iterator](), new Map().entries(), new Set().values(), ''[Symbol.iterator](), /a/[Symbol.matchAll]('a'),
    ];
    for (const value of hidden) deepFreeze(value, done);
    for (const name of names) {
      const value = globalThis[name];
      if (isObjectLike(value)) deepFreeze(value, done);
      Object.defineProperty(globalThis, name, { value, writable: false, enumerable: false, configurable: false });
    }
  }

  // Under gVisor node starts dumpable (its binary is readable there), and a process may open
  // its own /proc/self/mem: the program could read the tests, or the nonce, out of its
  // memory. A descriptor of it (the only way to a positioned read) is then refused, checked
  // on what was opened, not on the path; WASI, which opens files itself, is refused too.
  function memoryReadable() {
    try {
      fs.closeSync(fs.openSync('/proc/self/mem', 'r'));
      return true;
    } catch (e) {
      return false;
    }
  }

  function guardMemory() {
    const openSync = fs.openSync;
    const open = fs.open;
    const closeSync = fs.closeSync;
    const readlinkSync = fs.readlinkSync;
    const promises = require('fs/promises');
    const openHandle = promises.open;
    let handleFd;
    let handleClose;
    function isMemory(fd) {
      let target;
      try {
        target = readlinkSync(`/proc/self/fd/${fd}`);
      } catch (e) {
        return false;
      }
      return typeof target === 'string' && ReflectApply(StringPrototypeStartsWith, target, ['/proc/'])
        && target.length > 4 && ReflectApply(StringPrototypeSlice, target, [-4]) === '/mem';
    }
    function refused() {
      const error = new Error('EACCES: permission denied, open (the process\'s memory)');
      error.code = 'EACCES';
      error.errno = -13;
      error.syscall = 'open';
      return error;
    }
    function define(object, key, value) {
      Object.defineProperty(object, key, { value, writable: false, enumerable: true, configurable: false });
    }
    define(fs, 'openSync', function openSyncChecked() {
      const fd = ReflectApply(openSync, fs, arguments);
      if (isMemory(fd)) {
        closeSync(fd);
        throw refused();
      }
      return fd;
    });
    define(fs, 'open', function openChecked() {
      const args = [];
      for (let i = 0; i < arguments.length; i++) args[i] = arguments[i];
      const callback = args[args.length - 1];
      if (typeof callback === 'function') {
        args[args.length - 1] = function opened(error, fd) {
          if (error === null && isMemory(fd)) {
            closeSync(fd);
            ReflectApply(callback, undefined, [refused()]);
            return;
          }
          ReflectApply(callback, undefined, arguments);
        };
      }
      return ReflectApply(open, fs, args);
    });
    define(promises, 'open', async function openHandleChecked(...args) {
      const handle = await ReflectApply(openHandle, promises, args);
      if (handleFd === undefined) {
        // The first FileHandle anyone gets: its class, frozen before the program sees one.
        let proto = ReflectGetPrototypeOf(handle);
        handleFd = ReflectGetOwnPropertyDescriptor(proto, 'fd').get;
        handleClose = ReflectGetOwnPropertyDescriptor(proto, 'close').value;
        while (proto !== null && proto !== Object.prototype) {
          ObjectFreeze(proto);
          proto = ReflectGetPrototypeOf(proto);
        }
      }
      if (isMemory(ReflectApply(handleFd, handle, []))) {
        await ReflectApply(handleClose, handle, []);
        throw refused();
      }
      return handle;
    });
    const emitWarning = process.emitWarning;
    process.emitWarning = () => {};   // wasi is "experimental": no warning on every job
    const wasi = require('wasi');
    process.emitWarning = emitWarning;
    replace(wasi, ['WASI'], 'wasi');
    Object.freeze(wasi);
  }

  function lockDown(intrinsicNames) {
    if (memoryReadable()) guardMemory();
    const inspector = require('inspector');
    replace(inspector, ['open', 'url', 'waitForDebugger', 'Session'], 'inspector');
    Object.freeze(inspector);
    const v8 = require('v8');
    replace(v8, ['getHeapSnapshot', 'writeHeapSnapshot', 'setFlagsFromString', 'setHeapSnapshotNearHeapLimit',
      'takeCoverage', 'stopCoverage'], 'v8');
    // promise hooks would see every promise of every realm
    const hooks = {};
    replace(hooks, ['onInit', 'onSettled', 'onBefore', 'onAfter', 'createHook'], 'v8.promiseHooks');
    Object.defineProperty(v8, 'promiseHooks', { value: Object.freeze(hooks), writable: false, configurable: false });
    Object.freeze(v8);
    const asyncHooks = require('async_hooks');
    replace(asyncHooks, ['createHook', 'executionAsyncResource'], 'async_hooks');
    Object.freeze(asyncHooks);
    const workers = require('worker_threads');
    replace(workers, ['Worker'], 'worker_threads');
    Object.freeze(workers);
    try {
      const traceEvents = require('trace_events');
      replace(traceEvents, ['createTracing'], 'trace_events');
      Object.freeze(traceEvents);
    } catch (e) {
      // no tracing in this build
    }
    // Uncaught errors come here, before any 'uncaughtException' listener of the program.
    process.setUncaughtExceptionCaptureCallback(onUncaught);
    replace(process, ['binding', '_linkedBinding', 'dlopen', '_debugProcess', '_debugEnd', '_startProfilerIdleNotifier',
      '_stopProfilerIdleNotifier', 'setUncaughtExceptionCaptureCallback'], 'process');
    // These events carry values of the tests (a rejected promise and its reason) to listeners.
    const emit = process.emit;
    const dropped = ['unhandledRejection', 'rejectionHandled', 'multipleResolves', 'uncaughtException',
      'uncaughtExceptionMonitor'];
    Object.defineProperty(process, 'emit', {
      value: function emitEvent(type) {
        for (let i = 0; i < dropped.length; i++) {
          if (type === dropped[i]) return false;
        }
        return ReflectApply(emit, this, arguments);
      },
      writable: false,
      configurable: false,
    });
    // What node's own code looks up on process when the tests call it (util.callbackify,
    // util.deprecate hand values of the tests to these): the program keeps node's.
    for (const key of ['nextTick', 'emitWarning']) {
      Object.defineProperty(process, key, { value: process[key], writable: false, configurable: false });
    }
    // A SIGUSR1 listener replaces Node's own handler, which would start the inspector.
    process.on('SIGUSR1', () => {});
    const done = new Set();
    freezeIntrinsics(intrinsicNames, done);
    // What the tests get from node directly, and what this launcher calls later.
    for (const id of ['assert', 'assert/strict', 'util']) deepFreeze(require(id), done);
    for (const name of NODE_GLOBALS) deepFreeze(globalThis[name], done);
    deepFreeze(vm.Script.prototype, done);
    const timeout = setTimeout(() => {}, 0);
    deepFreeze(Object.getPrototypeOf(timeout), done);
    clearTimeout(timeout);
    const immediate = setImmediate(() => {});
    deepFreeze(Object.getPrototypeOf(immediate), done);
    clearImmediate(immediate);
  }

  return { __proto__: null, lockDown, ERROR_NAMES };
});
