// The membrane, in B: the tests' values as the program sees them. Arrays, plain objects,
// maps and sets of the tests arrive as copies made of A's intrinsics, their functions as A
// wrappers (bridgeA's wrap), their Promises as A Promises, their errors as A errors. Not a
// node module: evaluated in B after membrane.js (see there), and given what it returned.
(function membraneToA(membrane) {
  'use strict';
  const { apply, construct, defineProperty, get, getOwnPropertyDescriptor, getPrototypeOf, ownKeys, set,
    setPrototypeOf, isArray, hasOwn, wmGet, wmSet, mapGet, mapSet, mapForEach, setAdd, setForEach, dateGetTime,
    promiseThen, isPromise, isNativeError, isMap, isSet, isDate, isRegExp, isTypedArray, isArrayBuffer,
    BufferPrototype, bufferFrom, aWrap, AObject, AArray, AMap, ASet, ADate, ARegExp, APromise, AArrayBuffer,
    AUint8Array, errorsA, typedA, fromBCache, toACache, fromACache, crossed, ARRAY, PLAIN, MAP, SET, objectLike,
    toLength, safeGet, regexpCopy, typedCopy, bufferCopy, session } = membrane;

  // ---- B (or main) -> A
  function refToA(value, s) {
    if (!objectLike(value)) return value;
    let found;
    if ((found = apply(mapGet, s.seen, [value])) !== undefined) return found;
    if ((found = apply(wmGet, fromBCache, [value])) !== undefined) return found;
    if ((found = apply(wmGet, toACache, [value])) !== undefined) return found;
    if (typeof value === 'function') return functionToA(value);
    if (isPromise(value)) return promiseToA(value);
    let copy;
    let kind = 0;
    if (isArray(value)) {
      copy = construct(AArray, []);
      kind = ARRAY;
    } else if (isMap(value)) {
      copy = construct(AMap, []);
      kind = MAP;
    } else if (isSet(value)) {
      copy = construct(ASet, []);
      kind = SET;
    } else if (isDate(value)) {
      copy = construct(ADate, [apply(dateGetTime, value, [])]);
    } else if (isRegExp(value)) {
      copy = regexpCopy(ARegExp, value);
    } else if (isNativeError(value)) {
      copy = errorToA(value);
    } else if (isTypedArray(value)) {
      copy = getPrototypeOf(value) === BufferPrototype ? bufferFrom(value) : typedCopy(typedA, value);
    } else if (isArrayBuffer(value)) {
      copy = bufferCopy(AArrayBuffer, AUint8Array, value);
    } else {
      // plain objects, and instances of the tests' classes: their own enumerable properties
      copy = construct(AObject, []);
      if (getPrototypeOf(value) === null) setPrototypeOf(copy, null);
      kind = PLAIN;
    }
    apply(mapSet, s.seen, [value, copy]);
    if (kind !== 0) {
      const work = s.work;
      work[work.length] = value;
      work[work.length] = copy;
      work[work.length] = kind;
    }
    return copy;
  }

  function fillA(source, copy, kind, s) {
    if (kind === ARRAY) {
      // Stores into a new array of A: an index setter the program put on A's Array.prototype
      // could only see (and drop) A values.
      const length = toLength(get(source, 'length'));
      for (let i = 0; i < length; i++) {
        const value = source[i];
        if (objectLike(value)) copy[i] = refToA(value, s);
        else if (value !== undefined || apply(hasOwn, source, [i])) copy[i] = value;
      }
      set(copy, 'length', length);
    } else if (kind === PLAIN) {
      const keys = ownKeys(source);
      for (let i = 0; i < keys.length; i++) {
        const desc = getOwnPropertyDescriptor(source, keys[i]);
        if (desc === undefined || !desc.enumerable) continue;
        defineProperty(copy, keys[i], { value: refToA(get(source, keys[i]), s), writable: true, enumerable: true,
          configurable: true });
      }
    } else if (kind === MAP) {
      apply(mapForEach, source, [(value, key) => {
        apply(mapSet, copy, [refToA(key, s), refToA(value, s)]);
      }]);
    } else if (kind === SET) {
      apply(setForEach, source, [(value) => {
        apply(setAdd, copy, [refToA(value, s)]);
      }]);
    }
  }

  function drainA(s) {
    const work = s.work;
    while (work.length > 0) {
      const n = work.length;
      const source = work[n - 3];
      const copy = work[n - 2];
      const kind = work[n - 1];
      work.length = n - 3;
      if (s.filled !== undefined) {
        const filled = s.filled;
        filled[filled.length] = source;
        filled[filled.length] = copy;
        filled[filled.length] = kind;
      }
      fillA(source, copy, kind, s);
    }
  }

  function toA(value) {
    if (!objectLike(value)) return value;
    let found;
    if ((found = apply(wmGet, fromBCache, [value])) !== undefined) return found;
    if ((found = apply(wmGet, toACache, [value])) !== undefined) return found;
    const s = session(undefined, undefined);
    const result = refToA(value, s);
    drainA(s);
    return result;
  }

  function errorToA(error) {
    let name = safeGet(error, 'name');
    let message = safeGet(error, 'message');
    const code = safeGet(error, 'code');
    if (typeof name !== 'string') name = 'Error';
    if (typeof message !== 'string') message = '';
    const Ctor = errorsA[name] || errorsA.Error;
    const copy = Ctor === errorsA.AggregateError ? construct(Ctor, [construct(AArray, []), message])
      : construct(Ctor, [message]);
    if (Ctor === errorsA.Error && name !== 'Error') {
      defineProperty(copy, 'name', { value: name, writable: true, enumerable: false, configurable: true });
    }
    if (typeof code === 'string' || typeof code === 'number') {
      defineProperty(copy, 'code', { value: code, writable: true, enumerable: true, configurable: true });
    }
    apply(wmSet, toACache, [error, copy]);
    apply(wmSet, fromACache, [copy, error]);
    return copy;
  }

  // Never throws: on failure, an A error (or, if even that fails, a B error that the A
  // wrapper's launder replaces).
  function thrownToA(error) {
    try {
      if (!objectLike(error)) return error;
      let found = apply(wmGet, fromBCache, [error]);
      if (found !== undefined) return found;
      if (isNativeError(error)) {
        // An assertion of the tests failed inside a call of the program: if the program
        // swallows it (it does not come back out of the call), the run fails anyway.
        if (safeGet(error, 'name') === 'AssertionError' || safeGet(error, 'code') === 'ERR_ASSERTION') {
          apply(setAdd, crossed, [error]);
        }
      }
      found = apply(wmGet, toACache, [error]);
      if (found !== undefined) return found;
      return isNativeError(error) ? errorToA(error) : toA(error);
    } catch (e) {
      return construct(errorsA.Error, ['the tests threw a value that could not be converted']);
    }
  }

  function functionToA(fn) {
    const wrapper = aWrap(fn);
    apply(wmSet, toACache, [fn, wrapper]);
    apply(wmSet, fromACache, [wrapper, fn]);
    return wrapper;
  }

  function promiseToA(promise) {
    let resolve;
    let reject;
    const copy = construct(APromise, [(ok, bad) => {
      resolve = ok;
      reject = bad;
    }]);
    apply(wmSet, toACache, [promise, copy]);
    apply(wmSet, fromACache, [copy, promise]);
    apply(promiseThen, promise, [(value) => {
      try {
        resolve(toA(value));
      } catch (e) {
        reject(thrownToA(e));
      }
    }, (error) => {
      reject(thrownToA(error));
    }]);
    return copy;
  }

  return { __proto__: null, refToA, drainA, toA, thrownToA };
});
