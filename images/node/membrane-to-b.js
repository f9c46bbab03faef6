// The membrane, in B: the program's values as the tests see them (copies, proxies, B
// Promises, B errors), and the calls each way: into A (callA, then the write-back of the
// program's in-place changes) and into B (enter). Not a node module: evaluated in B after
// membrane.js and membrane-to-a.js (see membrane.js), and given what they returned.
(function membraneToB(membrane, towardA) {
  'use strict';
  const { apply, construct, defineProperty, deleteProperty, get, getOwnPropertyDescriptor, getPrototypeOf, has,
    ownKeys, set, setPrototypeOf, BError, BMap, BSet, BPromise, BProxy, BDate, BRegExp, BArrayBuffer, BUint8Array,
    create, isArray, hasOwn, bind, wmGet, wmSet, mapGet, mapSet, mapForEach, mapClear, setAdd, setForEach, setClear,
    setDelete, dateGetTime, isPromise, isNativeError, isMap, isSet, isDate, isRegExp, isTypedArray, isArrayBuffer,
    isProxy, BufferPrototype, bufferFrom, A, aSanction, aAwait, AObjectPrototype, mainObjectPrototype, errorsB,
    typedB, protoToB, sharedPrototypes, functionPrototype, toBCache, fromBCache, fromACache, targets, crossed, ARRAY,
    PLAIN, MAP, SET, objectLike, toLength, safeGet, regexpCopy, typedCopy, bufferCopy, session } = membrane;
  const { refToA, drainA, toA, thrownToA } = towardA;

  // ---- A (or main) -> B
  function refToB(value, s) {
    if (!objectLike(value)) return value;
    let found;
    if (s.back !== undefined && (found = apply(mapGet, s.back, [value])) !== undefined) return found;
    if ((found = apply(mapGet, s.seen, [value])) !== undefined) return found;
    if ((found = apply(wmGet, fromACache, [value])) !== undefined) return found;
    if ((found = apply(wmGet, toBCache, [value])) !== undefined) return found;
    if (typeof value === 'function') return proxyToB(value, true);
    if (isPromise(value)) return promiseToB(value);
    let copy;
    let kind = 0;
    let extra;
    let extraKeys;
    if (isArray(value)) {
      copy = [];
      kind = ARRAY;
    } else if (isMap(value)) {
      copy = new BMap();
      kind = MAP;
    } else if (isSet(value)) {
      copy = new BSet();
      kind = SET;
    } else if (isDate(value)) {
      copy = new BDate(apply(dateGetTime, value, []));
    } else if (isRegExp(value)) {
      copy = regexpCopy(BRegExp, value);
    } else if (isNativeError(value)) {
      copy = errorToB(value);
    } else if (isTypedArray(value)) {
      copy = getPrototypeOf(value) === BufferPrototype ? bufferFrom(value) : typedCopy(typedB, value);
    } else if (isArrayBuffer(value)) {
      copy = bufferCopy(BArrayBuffer, BUint8Array, value);
    } else {
      // A plain object of data is copied; one with methods or accessors (a namespace, a
      // stateful object) is a proxy, so that calls keep their `this` and state.
      const proto = getPrototypeOf(value);
      if (proto !== null && proto !== AObjectPrototype && proto !== mainObjectPrototype) return proxyToB(value, false);
      const keys = ownKeys(value);
      const descs = [];
      for (let i = 0; i < keys.length; i++) {
        const desc = getOwnPropertyDescriptor(value, keys[i]);
        if (desc !== undefined && (!apply(hasOwn, desc, ['value']) || typeof desc.value === 'function')) {
          return proxyToB(value, false);
        }
        descs[i] = desc;
      }
      copy = proto === null ? create(null) : {};
      kind = PLAIN;
      extra = descs;
      extraKeys = keys;
    }
    apply(mapSet, s.seen, [value, copy]);
    if (kind !== 0) {
      const work = s.work;
      work[work.length] = value;
      work[work.length] = copy;
      work[work.length] = kind;
      work[work.length] = extraKeys;
      work[work.length] = extra;
    }
    return copy;
  }

  function fillB(source, copy, kind, keys, descs, s) {
    if (kind === ARRAY) {
      // A hole reads undefined: only then is it told from an element (large arrays of
      // primitives are the common case, and each call copies them).
      const length = toLength(get(source, 'length'));
      for (let i = 0; i < length; i++) {
        const value = source[i];
        if (objectLike(value)) copy[i] = refToB(value, s);
        else if (value !== undefined || apply(hasOwn, source, [i])) copy[i] = value;
      }
      copy.length = length;
    } else if (kind === PLAIN) {
      for (let i = 0; i < keys.length; i++) {
        const desc = descs[i];
        if (desc === undefined || !desc.enumerable) continue;
        defineProperty(copy, keys[i], { value: refToB(desc.value, s), writable: true, enumerable: true,
          configurable: true });
      }
    } else if (kind === MAP) {
      apply(mapForEach, source, [(value, key) => {
        apply(mapSet, copy, [refToB(key, s), refToB(value, s)]);
      }]);
    } else if (kind === SET) {
      apply(setForEach, source, [(value) => {
        apply(setAdd, copy, [refToB(value, s)]);
      }]);
    }
  }

  function drainB(s) {
    const work = s.work;
    while (work.length > 0) {
      const n = work.length;
      const source = work[n - 5];
      const copy = work[n - 4];
      const kind = work[n - 3];
      const keys = work[n - 2];
      const descs = work[n - 1];
      work.length = n - 5;
      fillB(source, copy, kind, keys, descs, s);
    }
  }

  function toB(value, back) {
    if (!objectLike(value)) return value;
    let found;
    if (back !== undefined && (found = apply(mapGet, back, [value])) !== undefined) return found;
    if ((found = apply(wmGet, fromACache, [value])) !== undefined) return found;
    if ((found = apply(wmGet, toBCache, [value])) !== undefined) return found;
    const s = session(back, undefined);
    const result = refToB(value, s);
    drainB(s);
    return result;
  }

  // A thrown value of the program, for the tests: errors become B errors (name, message,
  // the program's stack text), anything else converts as a value.
  function thrownToB(error) {
    try {
      if (!objectLike(error)) return error;
      const found = apply(wmGet, fromACache, [error]);
      if (found !== undefined) return found;
      if (isNativeError(error)) return errorToB(error);
      return toB(error);
    } catch (e) {
      return new BError('the program threw a value that could not be converted');
    }
  }

  function errorToB(error) {
    const cached = apply(wmGet, toBCache, [error]);
    if (cached !== undefined) return cached;
    let name = safeGet(error, 'name');
    let message = safeGet(error, 'message');
    const stack = safeGet(error, 'stack');
    const code = safeGet(error, 'code');
    if (typeof name !== 'string') name = 'Error';
    if (typeof message !== 'string') message = '';
    const Ctor = errorsB[name] || BError;
    const copy = Ctor === errorsB.AggregateError ? new Ctor([], message) : new Ctor(message);
    if (Ctor === BError && name !== 'Error') {
      defineProperty(copy, 'name', { value: name, writable: true, enumerable: false, configurable: true });
    }
    if (typeof code === 'string' || typeof code === 'number') copy.code = code;
    if (typeof stack === 'string') {
      defineProperty(copy, 'stack', { value: stack, writable: true, enumerable: false, configurable: true });
    }
    // An error class of the program's own: the copy inherits from (a proxy of) its
    // prototype, so that `instanceof` the class holds in the tests.
    const proto = getPrototypeOf(error);
    if (proto !== null && apply(mapGet, protoToB, [proto]) === undefined) setPrototypeOf(copy, prototypeToB(proto));
    apply(wmSet, toBCache, [error, copy]);
    apply(wmSet, fromBCache, [copy, error]);
    return copy;
  }

  function promiseToB(promise) {
    let resolve;
    let reject;
    const copy = new BPromise((ok, bad) => {
      resolve = ok;
      reject = bad;
    });
    apply(wmSet, toBCache, [promise, copy]);
    apply(wmSet, fromBCache, [copy, promise]);
    aAwait(promise, (value) => {
      try {
        resolve(toB(value));
      } catch (e) {
        reject(thrownToB(e));
      }
    }, (error) => {
      reject(thrownToB(error));
    });
    return copy;
  }

  // A function or object of the program, as a B proxy: reads convert, calls convert.
  function originOf(target) {
    return apply(wmGet, targets, [target]);
  }

  function descriptorToB(desc) {
    if (apply(hasOwn, desc, ['value'])) {
      return { value: toB(desc.value), writable: desc.writable, enumerable: desc.enumerable, configurable: true };
    }
    return { get: toB(desc.get), set: toB(desc.set), enumerable: desc.enumerable, configurable: true };
  }

  function descriptorToA(desc) {
    const out = {};
    if (apply(hasOwn, desc, ['value'])) out.value = toA(desc.value);
    if (apply(hasOwn, desc, ['writable'])) out.writable = desc.writable;
    if (apply(hasOwn, desc, ['get'])) out.get = toA(desc.get);
    if (apply(hasOwn, desc, ['set'])) out.set = toA(desc.set);
    if (apply(hasOwn, desc, ['enumerable'])) out.enumerable = desc.enumerable;
    if (apply(hasOwn, desc, ['configurable'])) out.configurable = desc.configurable;
    return out;
  }

  function prototypeToB(proto) {
    if (proto === null) return null;
    const mapped = apply(mapGet, protoToB, [proto]);
    if (mapped !== undefined) return mapped;
    const found = apply(wmGet, fromACache, [proto]);
    if (found !== undefined) return found;
    return proxyToB(proto, typeof proto === 'function');
  }

  // Calls into A: the arguments and `this` convert in one session; arrays, objects, maps
  // and sets passed get the program's in-place changes written back after the call.
  function callA(f, thisArg, args, constructing) {
    let s;   // a conversion session, only when an object is among `this` and the arguments
    let aThis;
    if (!constructing && objectLike(thisArg)) {
      s = { seen: new BMap(), work: [], back: undefined, filled: [] };
      aThis = refToA(thisArg, s);
    } else if (!constructing) {
      aThis = thisArg;
    }
    const aArgs = [];
    for (let i = 0; i < args.length; i++) {
      const value = args[i];
      if (!objectLike(value)) {
        aArgs[i] = value;
        continue;
      }
      if (s === undefined) s = { seen: new BMap(), work: [], back: undefined, filled: [] };
      aArgs[i] = refToA(value, s);
    }
    if (s !== undefined) drainA(s);
    let result;
    try {
      result = constructing ? construct(f, aArgs) : apply(f, aThis, aArgs);
    } catch (error) {
      if (s !== undefined) writeBack(s.filled, new BMap());
      const thrown = thrownToB(error);
      apply(setDelete, crossed, [thrown]);   // an assertion of the tests, come back out
      throw thrown;
    }
    let back;
    if (s !== undefined && s.filled.length > 0) {
      back = new BMap();
      writeBack(s.filled, back);
    }
    if (!objectLike(result)) return result;
    try {
      return toB(result, back);
    } catch (error) {
      throw thrownToB(error);
    }
  }


  function writeBack(filled, back) {
    for (let i = 0; i < filled.length; i += 3) apply(mapSet, back, [filled[i + 1], filled[i]]);
    for (let i = 0; i < filled.length; i += 3) {
      try {
        syncB(filled[i], filled[i + 1], filled[i + 2], back);
      } catch (e) {
        // a getter of the program threw, or the tests' object is frozen: left as it is
      }
    }
  }

  function syncB(original, copy, kind, back) {
    const s = session(back, undefined);
    if (kind === ARRAY) {
      const length = toLength(get(copy, 'length'));
      for (let i = 0; i < length; i++) {
        let value = copy[i];
        if (value === undefined && !apply(hasOwn, copy, [i])) {
          if (apply(hasOwn, original, [i])) deleteProperty(original, i);
          continue;
        }
        if (objectLike(value)) value = refToB(value, s);
        const old = original[i];
        if (old !== value || (value === 0 && 1 / old !== 1 / value)
          || (old === undefined && !apply(hasOwn, original, [i]))) {
          set(original, i, value);
        }
      }
      if (original.length !== length) set(original, 'length', length);
    } else if (kind === PLAIN) {
      const keys = ownKeys(copy);
      const present = new BSet();
      for (let i = 0; i < keys.length; i++) {
        const desc = getOwnPropertyDescriptor(copy, keys[i]);
        if (desc === undefined || !desc.enumerable) continue;
        apply(setAdd, present, [keys[i]]);
        const value = refToB(get(copy, keys[i]), s);
        if (!apply(hasOwn, original, [keys[i]]) || original[keys[i]] !== value) set(original, keys[i], value);
      }
      const old = ownKeys(original);
      for (let i = 0; i < old.length; i++) {
        const desc = getOwnPropertyDescriptor(original, old[i]);
        if (desc !== undefined && desc.enumerable && !present.has(old[i])) deleteProperty(original, old[i]);
      }
    } else if (kind === MAP) {
      const entries = [];
      apply(mapForEach, copy, [(value, key) => {
        entries[entries.length] = refToB(key, s);
        entries[entries.length] = refToB(value, s);
      }]);
      apply(mapClear, original, []);
      for (let i = 0; i < entries.length; i += 2) apply(mapSet, original, [entries[i], entries[i + 1]]);
    } else if (kind === SET) {
      const values = [];
      apply(setForEach, copy, [(value) => {
        values[values.length] = refToB(value, s);
      }]);
      apply(setClear, original, []);
      for (let i = 0; i < values.length; i++) apply(setAdd, original, [values[i]]);
    }
    drainB(s);
  }

  const objectHandler = {
    __proto__: null,
    // Own and inherited properties of the program's object, up to a prototype that B has
    // too (Object.prototype, Function.prototype...): from there on B's, so that
    // f.call(...), o.hasOwnProperty(...) or x instanceof F mean what they do in B.
    get(target, key, receiver) {
      const origin = originOf(target);
      let shared;
      if (typeof origin === 'function' && (key === 'call' || key === 'apply' || key === 'bind')) {
        return get(functionPrototype, key, receiver);
      }
      try {
        if (isProxy(origin)) return toB(get(origin, key, origin));   // the program's own get trap
        let object = origin;
        for (;;) {
          const desc = getOwnPropertyDescriptor(object, key);
          if (desc !== undefined) {
            const value = apply(hasOwn, desc, ['value']) ? desc.value
              : desc.get === undefined ? undefined : apply(desc.get, origin, []);
            // A class's prototype stays one object (instanceof), not a copy per read.
            if (key === 'prototype' && object === origin && typeof origin === 'function' && objectLike(value)) {
              return prototypeToB(value);
            }
            return toB(value);
          }
          object = getPrototypeOf(object);
          if (object === null) return undefined;
          shared = apply(mapGet, sharedPrototypes, [object]);
          if (shared !== undefined) break;
        }
      } catch (error) {
        throw thrownToB(error);
      }
      return get(shared, key, receiver);
    },
    set(target, key, value) {
      const origin = originOf(target);
      const converted = toA(value);
      try {
        return set(origin, key, converted, origin);
      } catch (error) {
        throw thrownToB(error);
      }
    },
    has(target, key) {
      try {
        return has(originOf(target), key);
      } catch (error) {
        throw thrownToB(error);
      }
    },
    deleteProperty(target, key) {
      try {
        return deleteProperty(originOf(target), key);
      } catch (error) {
        throw thrownToB(error);
      }
    },
    ownKeys(target) {
      try {
        return ownKeys(originOf(target));
      } catch (error) {
        throw thrownToB(error);
      }
    },
    getOwnPropertyDescriptor(target, key) {
      try {
        const desc = getOwnPropertyDescriptor(originOf(target), key);
        return desc === undefined ? undefined : descriptorToB(desc);
      } catch (error) {
        throw thrownToB(error);
      }
    },
    defineProperty(target, key, desc) {
      const converted = descriptorToA(desc);
      try {
        return defineProperty(originOf(target), key, converted);
      } catch (error) {
        throw thrownToB(error);
      }
    },
    getPrototypeOf(target) {
      let proto;
      try {
        proto = getPrototypeOf(originOf(target));
      } catch (error) {
        throw thrownToB(error);
      }
      return prototypeToB(proto);
    },
    setPrototypeOf() {
      return false;
    },
    isExtensible() {
      return true;
    },
    preventExtensions() {
      return false;
    },
  };
  const functionHandler = {
    __proto__: objectHandler,
    apply(target, thisArg, args) {
      return callA(originOf(target), thisArg, args, false);
    },
    construct(target, args) {
      return callA(originOf(target), undefined, args, true);
    },
  };

  function proxyToB(value, callable) {
    const cached = apply(wmGet, toBCache, [value]);
    if (cached !== undefined) return cached;
    const target = callable ? apply(bind, function () {}, [undefined]) : {};
    if (callable) {
      // util.inspect shows a proxy's target: let it show the function's name
      const name = safeGet(value, 'name');
      if (typeof name === 'string') defineProperty(target, 'name', { value: name, configurable: true });
    }
    apply(wmSet, targets, [target, value]);
    const proxy = new BProxy(target, callable ? functionHandler : objectHandler);
    apply(wmSet, toBCache, [value, proxy]);
    apply(wmSet, fromBCache, [proxy, value]);
    return proxy;
  }

  // The program calls a function of the tests (through an A wrapper).
  function enter(fn, aThis, aArgs, aNewTarget) {
    let result;
    try {
      const s = session(undefined, undefined);
      const bThis = refToB(aThis, s);
      const length = toLength(get(aArgs, 'length'));
      const bArgs = [];
      for (let i = 0; i < length; i++) bArgs[i] = refToB(get(aArgs, i), s);
      drainB(s);
      result = aNewTarget === undefined ? apply(fn, bThis, bArgs) : construct(fn, bArgs);
      result = toA(result);
    } catch (error) {
      const converted = thrownToA(error);
      aSanction(converted);
      throw converted;
    }
    return result;
  }
  A.link(enter);

  return { __proto__: null, toB, thrownToB, proxyToB };
});
