// Realm A, the program's: bridgeA (evaluated in A), the program's globals, and the parameters
// of the function whose body the program is. Not a node module (see launcher.js, "Files"):
// launcher.js evaluates this file before any code of the program exists, calls the function
// it holds once, and keeps what that returns.
//
// Speed. Code in a vm context reads globals through node's interceptors (a C++ call
// each, measured 150x slower than in the main context): the program therefore runs as
// the body of a function whose enclosing function has the context's globals as
// parameters, so its own declarations and the builtins it uses are plain variables
// (top-level `var`s are then not properties of globalThis). Script syntax is checked
// first (a syntax error exits with status 3, compile_error); console is a parameter of
// the body itself, so a program's `const console` is an error, as it was. The tests run
// as a script in B (their completion value is needed).
(function realmProgram(require, primordials, RESERVED) {
  'use strict';
  const vm = require('vm');
  const path = require('path');
  const { createRequire } = require('module');
  const { ObjectCreate, VmScript } = primordials;

  // Globals of the program's realm besides its builtins (data properties are copied; node's
  // lazy ones stay accessors).
  const PROGRAM_GLOBALS = ['process', 'Buffer', 'URL', 'URLSearchParams', 'TextEncoder', 'TextDecoder', 'AbortController',
    'AbortSignal', 'EventTarget', 'Event', 'atob', 'btoa', 'structuredClone', 'performance', 'setTimeout', 'clearTimeout',
    'setInterval', 'clearInterval', 'setImmediate', 'clearImmediate', 'queueMicrotask'];

  // Evaluated in A before the program runs: A's intrinsics, the program's console, and the
  // A side of the membrane (wrappers of the tests' functions, the awaiting of A promises).
  function bridgeA() {
    'use strict';
    const intrinsics = {
      __proto__: null, global: globalThis, Object, Function, Array, Map, Set, Date, RegExp, Promise, ArrayBuffer,
      Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError, AggregateError,
      Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, Float32Array,
      Float64Array, BigInt64Array, BigUint64Array,
    };
    const names = Object.getOwnPropertyNames(globalThis);
    const defineProperty = Reflect.defineProperty;
    const freeze = Object.freeze;
    const AssertionErrorBase = Error;
    const RangeErrorA = RangeError;
    const StringA = String;

    class AssertionError extends AssertionErrorBase {
      constructor(message, actual) {
        super(message);
        defineProperty(this, 'name', { value: 'AssertionError', writable: true, enumerable: false, configurable: true });
        this.code = 'ERR_ASSERTION';
        this.actual = actual;
        this.expected = true;
        this.operator = '==';
      }
    }

    // The program's console: node's methods, and an assert that throws as test frameworks' do.
    function makeConsole(methods) {
      const console = {};
      for (let i = 0; i < methods.length; i += 2) {
        defineProperty(console, methods[i], { value: methods[i + 1], writable: false, enumerable: true, configurable: false });
      }
      defineProperty(console, 'assert', {
        value: function assert(value, ...message) {
          if (!value) {
            let text = 'Assertion failed';
            for (let i = 0; i < message.length; i++) text += ` ${StringA(message[i])}`;
            throw new AssertionError(text, value);
          }
        },
        writable: false,
        enumerable: true,
        configurable: false,
      });
      return freeze(console);
    }

    function makeRequire(nodeRequire, resolve, module) {
      const require = function require(id) {
        return nodeRequire(id);
      };
      require.resolve = function resolveModule(request) {
        return resolve(request);
      };
      require.main = module;   // `require.main === module`: the program is the main module
      return require;
    }

    // Functions of the tests, as the program sees them. `enter` (B) converts and calls; what
    // it throws, it first sanctions here: anything else reaching these catch blocks (a B
    // error, say from a stack overflow inside the membrane) is replaced by an A error.
    let enter;
    let pending = false;
    let pendingValue;
    function link(bEnter) {
      if (enter === undefined) enter = bEnter;
    }
    function sanction(value) {
      pending = true;
      pendingValue = value;
    }
    function launder(error) {
      if (pending && error === pendingValue) {
        pending = false;
        pendingValue = undefined;
        return error;
      }
      pending = false;
      pendingValue = undefined;
      return new RangeErrorA('Maximum call stack size exceeded');
    }
    function wrap(target) {
      return function () {
        try {
          return enter(target, this, arguments, new.target);
        } catch (error) {
          throw launder(error);
        }
      };
    }
    // A promise of the program, awaited here (no species lookup, no then of ours it sees).
    async function awaitPromise(promise, ok, bad) {
      let value;
      try {
        value = await promise;
      } catch (error) {
        try {
          bad(error);
        } catch (e) {
          // bad never throws
        }
        return;
      }
      try {
        ok(value);
      } catch (e) {
        // ok never throws
      }
    }
    return { __proto__: null, intrinsics, names, makeConsole, makeRequire, link, sanction, wrap, awaitPromise };
  }

  // Realm A: its context, bridgeA evaluated in it, the program's console and globals.
  function createRealmA(workDir, programPath) {
    const contextA = vm.createContext(ObjectCreate(null), { name: 'program' });
    const realmA = new VmScript(`(${bridgeA})`, { filename: 'proctor-bridge-a' })
      .runInContext(contextA)();
    const intrinsicNames = realmA.names.filter((name) => name !== 'console' && name !== 'globalThis');
    const globalA = realmA.intrinsics.global;
    const nodeRequire = createRequire(path.join(workDir, 'main.js'));
    const consoleMethods = [];
    for (const key of Object.keys(console)) {
      if (key !== 'assert' && typeof console[key] === 'function') consoleMethods.push(key, console[key]);
    }
    const consoleA = realmA.makeConsole(consoleMethods);
    Object.defineProperty(globalA, 'console', { value: consoleA, writable: false, enumerable: false, configurable: false });
    const moduleA = vm.runInContext('({ exports: {}, id: ".", loaded: false, children: [], paths: [] })', contextA);
    moduleA.filename = programPath;
    const extra = {
      require: realmA.makeRequire(nodeRequire, (request) => nodeRequire.resolve(request), moduleA),
      module: moduleA, exports: moduleA.exports, global: globalA,
      __filename: programPath, __dirname: path.dirname(programPath),
    };
    for (const name of PROGRAM_GLOBALS) {
      let desc = Object.getOwnPropertyDescriptor(globalThis, name);
      if (desc === undefined) continue;
      if (name === 'process' || name === 'Buffer') desc = { value: globalThis[name], writable: true, configurable: true };
      Object.defineProperty(globalA, name, { ...desc, enumerable: false });
    }
    for (const name of Object.keys(extra)) {
      Object.defineProperty(globalA, name, { value: extra[name], writable: true, enumerable: false, configurable: true });
    }
    return { __proto__: null, contextA, realmA, intrinsicNames, globalA, consoleA, extra };
  }

  // The parameters of the function whose body the program is (see Speed above): the globals
  // of A that are data properties and whose names the program can use.
  function programAliases(realm) {
    const { realmA, globalA, extra } = realm;
    const aliases = [];
    const aliasValues = [];
    for (const name of [...realmA.names, ...PROGRAM_GLOBALS, ...Object.keys(extra)]) {
      const desc = Object.getOwnPropertyDescriptor(globalA, name);
      if (desc === undefined || !('value' in desc) || !/^[A-Za-z_$][\w$]*$/.test(name) || RESERVED.has(name)
        || name === 'console' || aliases.includes(name)) continue;
      aliases.push(name);
      aliasValues.push(desc.value);
    }
    return { __proto__: null, aliases, aliasValues };
  }

  return { __proto__: null, createRealmA, programAliases };
});
