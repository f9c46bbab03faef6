// The names the tests take from the program, and the program as the body of a function. Not
// a node module (see launcher.js, "Files"): launcher.js evaluates this file before any code
// of the program exists, calls the function it holds once, and keeps what that returns.
(function programNames() {
  'use strict';
  const RESERVED = new Set(('break case catch class const continue debugger default delete do else enum export extends '
    + 'false finally for function if import in instanceof new null return super switch this throw true try typeof var '
    + 'void while with yield let static implements interface package private protected public await eval arguments')
    .split(' '));

  // Identifiers the tests mention that B does not have and the tests do not declare as a
  // function or class (node's vm would keep an accessor of B's global in their place): the
  // program's bindings of these names, if any, become B globals.
  const IDENTIFIER = /[\p{ID_Start}$_][\p{ID_Continue}$\u200C\u200D]*/gu;
  const DECLARED = /(?:^|[^\p{ID_Continue}$])(?:function\s*\*?\s*|class\s+)([\p{ID_Start}$_][\p{ID_Continue}$\u200C\u200D]*)/gu;

  function testNames(tests, bGlobals) {
    const declared = new Set();
    for (const m of tests.matchAll(DECLARED)) declared.add(m[1]);
    const names = [];
    const seen = new Set(bGlobals);
    for (const m of tests.matchAll(IDENTIFIER)) {
      const name = m[0];
      if (seen.has(name) || RESERVED.has(name) || declared.has(name) || name.startsWith('$proctor$')) continue;
      seen.add(name);
      names.push(name);
    }
    return names;
  }

  // The program as the body of a function: `outer(...aliases)` returns `body`, called with
  // the console; it returns access(op, k, v) over the names the tests use.
  function wrapProgram(source, aliases, names) {
    let body = source;
    if (body.startsWith('#!')) body = `//${body.slice(2)}`;
    let cases = '';
    names.forEach((name, k) => {
      cases += ` case ${k}: if ($proctor$op === 0) { try { void ${name}; return true; } catch ($proctor$e) { return false; } }`
        + ` if ($proctor$op === 1) return ${name}; ${name} = $proctor$v; return;`;
    });
    return `(function (${aliases.join(', ')}) { return function (console) {\n${body}\n;`
      + `return function ($proctor$op, $proctor$k, $proctor$v) { switch ($proctor$k) {${cases} } return false; };`
      + ' }; })';
  }

  return { __proto__: null, RESERVED, testNames, wrapProgram };
});
