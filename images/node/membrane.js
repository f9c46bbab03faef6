// The membrane between the program (realm A) and the tests (realm B), evaluated in B. This
// file holds what it captured of B and of the launcher (`host`) before anything ran, the
// tables and caches both directions share, and their helpers; membrane-to-a.js and
// membrane-to-b.js convert; realm-tests.js makes what B has of its own. None of the four is
// a node module (see launcher.js, "Files"): launcher.js reads them before any code of the
// program exists and evaluates them in B, in that order, each file's function given what
// the ones before it returned. What crosses the membrane, and as what: launcher.js, "Realms".
//
// Introspection. Every function of the membrane is strict, and one of them is on the
// stack between any code of the program and any code of the tests: V8 then censors
// Function.caller / arguments.callee.caller (null) and, in Error.prepareStackTrace,
// CallSite.getFunction() and getThis() (undefined) for the strict frame and every frame
// below it (measured on node 18: with a sloppy frame in between, getFunction() returned
// the test function and getThis() B's global). So the tests keep their own (sloppy)
// semantics; a stack trace in the program still names the tests' functions and lines, as
// node's own would, but no test function, source or value. The main realm's
// Error.prepareStackTrace, which node calls for errors of every realm, is locked.
//
// Evaluated in B before the program runs; `host` is read here (and in realm-tests.js) and
// never again. Returns what the other three files use. All of it strict (see above).
(function membrane(host) {
  'use strict';
  const { apply, construct, defineProperty, deleteProperty, get, getOwnPropertyDescriptor, getPrototypeOf, has, ownKeys,
    set, setPrototypeOf } = Reflect;
  const BError = Error;
  const BTypeError = TypeError;
  const BMap = Map;
  const BSet = Set;
  const BWeakMap = WeakMap;
  const BPromise = Promise;
  const BProxy = Proxy;
  const BDate = Date;
  const BRegExp = RegExp;
  const BArrayBuffer = ArrayBuffer;
  const BUint8Array = Uint8Array;
  const BNumber = Number;
  const create = Object.create;
  const freeze = Object.freeze;
  const isArray = Array.isArray;
  const hasOwn = Object.prototype.hasOwnProperty;
  const bind = Function.prototype.bind;
  const wmGet = WeakMap.prototype.get;
  const wmSet = WeakMap.prototype.set;
  const mapGet = Map.prototype.get;
  const mapSet = Map.prototype.set;
  const mapForEach = Map.prototype.forEach;
  const mapClear = Map.prototype.clear;
  const setAdd = Set.prototype.add;
  const setForEach = Set.prototype.forEach;
  const setClear = Set.prototype.clear;
  const setDelete = Set.prototype.delete;
  const setValues = Set.prototype.values;
  const dateGetTime = Date.prototype.getTime;
  const promiseThen = Promise.prototype.then;
  const arrayJoin = Array.prototype.join;
  const captureStackTrace = Error.captureStackTrace;
  const getter = (object, key) => getOwnPropertyDescriptor(object, key).get;
  const rxSource = getter(RegExp.prototype, 'source');
  const rxFlags = ['hasIndices', 'd', 'global', 'g', 'ignoreCase', 'i', 'multiline', 'm', 'dotAll', 's', 'unicode', 'u',
    'sticky', 'y'];
  for (let i = 0; i < rxFlags.length; i += 2) rxFlags[i] = getter(RegExp.prototype, rxFlags[i]);
  const TypedArrayPrototype = getPrototypeOf(Uint8Array.prototype);
  const taLength = getter(TypedArrayPrototype, 'length');
  const taTag = getter(TypedArrayPrototype, Symbol.toStringTag);
  const taSet = TypedArrayPrototype.set;
  const abByteLength = getter(ArrayBuffer.prototype, 'byteLength');
  const globalB = globalThis;
  const MAX_LENGTH = 2 ** 53 - 1;

  const { isPromise, isNativeError, isMap, isSet, isDate, isRegExp, isTypedArray, isArrayBuffer, isProxy } = host.types;
  const BufferPrototype = host.Buffer.prototype;
  const bufferFrom = host.Buffer.from;
  const A = host.realmA;
  const AI = A.intrinsics;
  const aSanction = A.sanction;
  const aWrap = A.wrap;
  const aAwait = A.awaitPromise;
  const AObject = AI.Object;
  const AArray = AI.Array;
  const AMap = AI.Map;
  const ASet = AI.Set;
  const ADate = AI.Date;
  const ARegExp = AI.RegExp;
  const APromise = AI.Promise;
  const AArrayBuffer = AI.ArrayBuffer;
  const AUint8Array = AI.Uint8Array;
  const AObjectPrototype = AI.Object.prototype;
  const mainObjectPrototype = host.mainObjectPrototype;

  const ERROR_NAMES = ['Error', 'TypeError', 'RangeError', 'SyntaxError', 'ReferenceError', 'EvalError', 'URIError',
    'AggregateError'];
  const TYPED = ['Int8Array', 'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array', 'Int32Array',
    'Uint32Array', 'Float32Array', 'Float64Array', 'BigInt64Array', 'BigUint64Array'];
  const errorsB = create(null);
  const errorsA = create(null);
  for (let i = 0; i < ERROR_NAMES.length; i++) {
    errorsB[ERROR_NAMES[i]] = globalB[ERROR_NAMES[i]];
    errorsA[ERROR_NAMES[i]] = AI[ERROR_NAMES[i]];
  }
  const typedB = create(null);
  const typedA = create(null);
  for (let i = 0; i < TYPED.length; i++) {
    typedB[TYPED[i]] = globalB[TYPED[i]];
    typedA[TYPED[i]] = AI[TYPED[i]];
  }
  // Prototypes of A (and of the main realm) that B shows as its own.
  const PROTOTYPES = ['Object', 'Function', 'Array', 'Map', 'Set', 'Date', 'RegExp', 'Promise', 'ArrayBuffer'];
  const protoToB = new BMap();
  const sharedPrototypes = new BMap();   // those whose methods do not check their receiver's kind
  const mainIntrinsics = host.mainIntrinsics;
  const ALL = [...PROTOTYPES, ...ERROR_NAMES, ...TYPED];
  for (let i = 0; i < ALL.length; i++) {
    const bProto = globalB[ALL[i]].prototype;
    apply(mapSet, protoToB, [AI[ALL[i]].prototype, bProto]);
    apply(mapSet, protoToB, [mainIntrinsics[ALL[i]].prototype, bProto]);
  }
  const functionPrototype = Function.prototype;
  const SHARED = ['Object', 'Function', 'Array', ...ERROR_NAMES];
  for (let i = 0; i < SHARED.length; i++) {
    const bProto = globalB[SHARED[i]].prototype;
    apply(mapSet, sharedPrototypes, [AI[SHARED[i]].prototype, bProto]);
    apply(mapSet, sharedPrototypes, [mainIntrinsics[SHARED[i]].prototype, bProto]);
  }

  const toBCache = new BWeakMap();     // A value -> its B proxy / B promise / B error
  const fromBCache = new BWeakMap();   // B proxy / promise / error -> the A original
  const toACache = new BWeakMap();     // B function / promise -> its A wrapper / promise
  const fromACache = new BWeakMap();   // A wrapper / promise -> the B original
  const targets = new BWeakMap();      // proxy target (B) -> the A object behind it
  const crossed = new BSet();          // assertion errors of the tests thrown into the program

  const ARRAY = 1;
  const PLAIN = 2;
  const MAP = 3;
  const SET = 4;

  function objectLike(value) {
    return (typeof value === 'object' && value !== null) || typeof value === 'function';
  }

  function toLength(value) {
    const n = typeof value === 'number' ? value : BNumber(value);
    if (!(n > 0)) return 0;
    return n > MAX_LENGTH ? MAX_LENGTH : n - (n % 1);
  }

  function safeGet(object, key) {
    try {
      return get(object, key);
    } catch (e) {
      return undefined;
    }
  }

  function regexpCopy(Ctor, rx) {
    let flags = '';
    for (let i = 0; i < rxFlags.length; i += 2) {
      if (apply(rxFlags[i], rx, [])) flags += rxFlags[i + 1];
    }
    return construct(Ctor, [apply(rxSource, rx, []), flags]);
  }

  function typedCopy(table, value) {
    const copy = construct(table[apply(taTag, value, [])], [apply(taLength, value, [])]);
    apply(taSet, copy, [value]);
    return copy;
  }

  function bufferCopy(ArrayBufferCtor, Uint8Ctor, value) {
    const copy = construct(ArrayBufferCtor, [apply(abByteLength, value, [])]);
    apply(taSet, construct(Uint8Ctor, [copy]), [construct(BUint8Array, [value])]);
    return copy;
  }

  // A conversion: `seen` maps each source object to its copy (cycles, shared parts),
  // `work` holds copies still to fill, `filled` (when given) records them for write-back,
  // `back` (when given) maps A copies made for a call back to the B objects they copy.
  function session(back, filled) {
    return { seen: new BMap(), work: [], back, filled };
  }

  return {
    __proto__: null, apply, construct, defineProperty, deleteProperty, get, getOwnPropertyDescriptor,
    getPrototypeOf, has, ownKeys, set, setPrototypeOf, BError, BTypeError, BMap, BSet, BPromise, BProxy, BDate,
    BRegExp, BArrayBuffer, BUint8Array, BNumber, create, freeze, isArray, hasOwn, bind, wmGet, wmSet, mapGet, mapSet,
    mapForEach, mapClear, setAdd, setForEach, setClear, setDelete, setValues, dateGetTime, promiseThen, arrayJoin,
    captureStackTrace, globalB, isPromise, isNativeError, isMap, isSet, isDate, isRegExp, isTypedArray, isArrayBuffer,
    isProxy, BufferPrototype, bufferFrom, A, aSanction, aWrap, aAwait, AObject, AArray, AMap, ASet, ADate, ARegExp,
    APromise, AArrayBuffer, AUint8Array, AObjectPrototype, mainObjectPrototype, errorsB, errorsA, typedB, typedA,
    protoToB, sharedPrototypes, functionPrototype, toBCache, fromBCache, toACache, fromACache, targets, crossed,
    ARRAY, PLAIN, MAP, SET, objectLike, toLength, safeGet, regexpCopy, typedCopy, bufferCopy, session,
  };
});
