// Realm B, the tests': what B has of its own (console, require, timers, process, and node's
// globals the tests get too), and the program's top-level bindings the tests name, as
// accessors of B's global object. Not a node module: evaluated in B after the membrane
// (see membrane.js), and given what its files returned; `host` is read here (and in
// membrane.js) and never again. Returns the functions the launcher calls later.
(function realmTests(host, membrane, towardA, towardB) {
  'use strict';
  const { apply, defineProperty, getPrototypeOf, ownKeys, BError, BTypeError, BMap, BPromise, BNumber, create, freeze,
    wmSet, mapGet, mapSet, setValues, promiseThen, arrayJoin, captureStackTrace, globalB, isTypedArray, fromBCache,
    crossed } = membrane;
  const { toA } = towardA;
  const { toB, thrownToB, proxyToB } = towardB;
  const format = host.format;
  const inspect = host.inspect;
  const write = host.write;
  const hostExit = host.exit;
  const hostUncaught = host.uncaught;
  const hostExitCode = host.exitCode;
  const hostRequire = host.require;
  const hostFire = host.fire;
  const hostNow = host.now;
  const hostDecode = host.decode;
  const hostTimers = host.timers;
  const hostSetTimeout = hostTimers.setTimeout;
  const hostClearTimeout = hostTimers.clearTimeout;
  const hostSetInterval = hostTimers.setInterval;
  const hostClearInterval = hostTimers.clearInterval;
  const hostSetImmediate = hostTimers.setImmediate;
  const hostClearImmediate = hostTimers.clearImmediate;
  const hostProcess = host.process;
  const nodeGlobals = host.nodeGlobals;
  const testsArgv = [host.argv0, host.testsPath];
  const trusted = new BMap();
  for (let i = 0; i < host.trusted.length; i += 2) apply(mapSet, trusted, [host.trusted[i], host.trusted[i + 1]]);

  // ---- what B has of its own: console, require, timers, process
  class AssertionError extends BError {
    constructor(options) {
      super(options.message);
      defineProperty(this, 'name', { value: 'AssertionError [ERR_ASSERTION]', writable: true, enumerable: false,
        configurable: true });
      this.generatedMessage = false;
      this.code = 'ERR_ASSERTION';
      this.actual = options.actual;
      this.expected = options.expected;
      this.operator = options.operator;
      captureStackTrace(this, options.stackStartFn || AssertionError);
      this.stack;   // eslint-disable-line no-unused-expressions -- the stack's first line names the code
      this.name = 'AssertionError';
    }
  }

  let indent = '';
  function emit(fd, text) {
    if (indent !== '') {
      let out = indent;
      for (let i = 0; i < text.length; i++) out += text[i] === '\n' ? `\n${indent}` : text[i];
      text = out;
    }
    write(fd, `${text}\n`);
  }
  const counts = new BMap();
  const timers = new BMap();
  const console = {
    log(...args) { emit(1, apply(format, undefined, args)); },
    info(...args) { emit(1, apply(format, undefined, args)); },
    debug(...args) { emit(1, apply(format, undefined, args)); },
    warn(...args) { emit(2, apply(format, undefined, args)); },
    error(...args) { emit(2, apply(format, undefined, args)); },
    table(...args) { emit(1, apply(format, undefined, args)); },
    dir(object, options) { emit(1, inspect(object, { customInspect: false, ...options })); },
    dirxml(...args) { emit(1, apply(format, undefined, args)); },
    trace(...args) {
      const error = { name: 'Trace', message: apply(format, undefined, args) };
      captureStackTrace(error, console.trace);
      emit(2, error.stack);
    },
    assert(value, ...message) {
      if (!value) {
        throw new AssertionError({ message: apply(arrayJoin, ['Assertion failed', ...message], [' ']), actual: value,
          expected: true, operator: '==', stackStartFn: console.assert });
      }
    },
    group(...label) {
      if (label.length > 0) emit(1, apply(format, undefined, label));
      indent += '  ';
    },
    groupCollapsed(...label) { console.group(...label); },
    groupEnd() { indent = indent.slice(0, -2); },
    count(label = 'default') {
      const key = `${label}`;
      const n = (apply(mapGet, counts, [key]) || 0) + 1;
      apply(mapSet, counts, [key, n]);
      emit(1, `${key}: ${n}`);
    },
    countReset(label = 'default') { apply(mapSet, counts, [`${label}`, 0]); },
    time(label = 'default') { apply(mapSet, timers, [`${label}`, hostNow()]); },
    timeLog(label = 'default', ...data) {
      const start = apply(mapGet, timers, [`${label}`]);
      if (start !== undefined) emit(1, apply(format, undefined, [`${label}: ${hostNow() - start}ms`, ...data]));
    },
    timeEnd(label = 'default') {
      console.timeLog(label);
      apply(mapSet, timers, [`${label}`, undefined]);
    },
  };

  function require(id) {
    if (typeof id === 'string') {
      const module = apply(mapGet, trusted, [id]);
      if (module !== undefined) return module;
    }
    let module;
    try {
      module = hostRequire(toA(id));
    } catch (error) {
      throw thrownToB(error);
    }
    return toB(module);
  }

  function checkCallback(callback) {
    if (typeof callback !== 'function') {
      const error = new BTypeError(`The "callback" argument must be of type function. Received ${typeof callback}`);
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
  }
  const resolved = BPromise.resolve();
  function later(callback, args) {
    apply(promiseThen, resolved, [() => {
      try {
        apply(callback, undefined, args);
      } catch (error) {
        hostUncaught(error);
      }
    }]);
  }
  const ownTimers = {
    setTimeout(callback, ms, ...args) {
      checkCallback(callback);
      return hostSetTimeout(hostFire(callback, args), ms);
    },
    setInterval(callback, ms, ...args) {
      checkCallback(callback);
      return hostSetInterval(hostFire(callback, args), ms);
    },
    setImmediate(callback, ...args) {
      checkCallback(callback);
      return hostSetImmediate(hostFire(callback, args));
    },
    clearTimeout(timer) { hostClearTimeout(timer); },
    clearInterval(timer) { hostClearInterval(timer); },
    clearImmediate(immediate) { hostClearImmediate(immediate); },
    queueMicrotask(callback) {
      checkCallback(callback);
      later(callback, []);
    },
  };

  // process: exit, exitCode, argv and stdout/stderr are the launcher's; the rest is node's
  // process object, as the program's realm has it (through the membrane).
  let exitCode;
  function streamOf(fd) {
    return freeze({
      fd,
      isTTY: false,
      write(chunk, encoding, callback) {
        write(fd, typeof chunk === 'string' ? chunk
          : isTypedArray(chunk) ? hostDecode(chunk) : apply(format, undefined, ['%s', chunk]));
        if (typeof encoding === 'function') later(encoding, []);
        else if (typeof callback === 'function') later(callback, []);
        return true;
      },
    });
  }
  const processB = create(proxyToB(hostProcess, false));
  apply(wmSet, fromBCache, [processB, hostProcess]);
  defineProperty(processB, 'argv', { value: testsArgv, writable: true, enumerable: true, configurable: true });
  defineProperty(processB, 'stdout', { value: streamOf(1), writable: true, enumerable: true, configurable: true });
  defineProperty(processB, 'stderr', { value: streamOf(2), writable: true, enumerable: true, configurable: true });
  defineProperty(processB, 'exit', {
    value: function exit(code) {
      const status = code === undefined ? exitCode : code;
      hostExit(status === undefined ? 0 : BNumber(status) | 0);
    },
    writable: true, enumerable: true, configurable: true,
  });
  defineProperty(processB, 'exitCode', {
    get() { return exitCode; },
    set(value) {
      exitCode = value;
      hostExitCode(value === undefined ? 0 : BNumber(value) | 0);
    },
    enumerable: true, configurable: true,
  });
  defineProperty(processB, 'nextTick', {
    value: function nextTick(callback, ...args) {
      checkCallback(callback);
      later(callback, args);
    },
    writable: true, enumerable: true, configurable: true,
  });

  const globals = { console, require, process: processB, global: globalB, ...ownTimers };
  // node's own, frozen before the program ran: tests compute expected values with them
  for (let i = 0; i < nodeGlobals.length; i += 2) globals[nodeGlobals[i]] = nodeGlobals[i + 1];
  const names = ownKeys(globals);
  for (let i = 0; i < names.length; i++) {
    defineProperty(globalB, names[i], { value: globals[names[i]], writable: true, enumerable: false,
      configurable: true });
  }

  // The program's top-level bindings the tests name, as accessors of B's global object.
  // `access(0, k)`: does binding k exist; `access(1, k)`: its value; `access(2, k, v)`: set it.
  function importNames(access, nameList) {
    for (let k = 0; k < nameList.length; k++) {
      let exists;
      try {
        exists = access(0, k) === true;
      } catch (e) {
        exists = false;
      }
      if (!exists) continue;
      defineProperty(globalB, nameList[k], {
        get() {
          let value;
          try {
            value = access(1, k);
          } catch (error) {
            throw thrownToB(error);
          }
          try {
            return toB(value);
          } catch (error) {
            throw thrownToB(error);
          }
        },
        set(value) {
          const converted = toA(value);
          try {
            access(2, k, converted);
          } catch (error) {
            throw thrownToB(error);
          }
        },
        enumerable: true,
        configurable: true,
      });
    }
  }

  function whenSettled(promise, ok, bad) {
    apply(promiseThen, promise, [ok, bad]);
  }

  // An assertion error of the tests that went into the program and never came back.
  function swallowedAssertion() {
    return apply(setValues, crossed, []).next().value;
  }

  // The names B's global object has, own or inherited (toString...): never the program's.
  const globalNames = [];
  for (let object = globalB; object !== null; object = getPrototypeOf(object)) {
    const keys = ownKeys(object);
    for (let i = 0; i < keys.length; i++) globalNames[globalNames.length] = keys[i];
  }
  return { __proto__: null, importNames, whenSettled, swallowedAssertion, globalNames };
});
