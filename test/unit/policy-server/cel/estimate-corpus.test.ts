// Legitimate policies are not refused by the cost estimate: every CEL expression written in
// the repository's tests, the differential corpus against the apiserver, the bench, the demo
// and the examples loads within the budget (docs/cel.md, "Cost"). Expressions are found as
// string literals in those sources; a literal that is not CEL (a test name, a message) does
// not compile and is not counted.
import assert from 'node:assert/strict';
import { globSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { validations as benchValidations } from '../../../../bench/admission-policies.ts';
import { demoManifests } from '../../../../tooling/demo/manifests.ts';
import { compilePolicy, costProblem, type PolicyCode } from '../../../../data-plane/cel/index.ts';

const root = join(import.meta.dirname, '../../../..');

/** Sources that hold policies; the hostile-policy tests are meant to be refused. */
const SOURCES = [
  'test/unit/**/*.test.ts',
  'test/integration/**/*.test.ts',
  'test/support/*.ts',
  'bench/*.ts',
  'cli/*.ts',
];
const HOSTILE = new Set([
  'test/integration/policy-server/hostile.test.ts',
  'test/integration/e2e/hostile-policies.test.ts',
  'test/unit/policy-server/cel/estimate.test.ts',
  'bench/attack.ts',
]);

const ESCAPES: Record<string, string> = { n: '\n', t: '\t', r: '\r', b: '\b', f: '\f', v: '\v' };

function unescape(body: string): string {
  return body.replace(
    /\\(u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|\n|[\s\S])/g,
    (_m, e: string) => {
      if (e.startsWith('u{')) return String.fromCodePoint(parseInt(e.slice(2, -1), 16));
      if (e.length > 1 && (e[0] === 'u' || e[0] === 'x'))
        return String.fromCharCode(parseInt(e.slice(1), 16));
      if (e === '\n') return '';
      return ESCAPES[e] ?? (e === '0' ? '\0' : e);
    },
  );
}

/** Characters after which a `/` starts a regular expression rather than a division. */
const BEFORE_REGEX = /[(,=:[!&|?{};+\-*%<>~^]$|^$|\breturn$/;

/**
 * The string literals of a TypeScript source, in order, with `'a' + 'b'` joined as one and
 * templates without substitutions kept; comments and regular expressions are skipped.
 */
export function stringLiterals(source: string): string[] {
  const out: string[] = [];
  let previousEnd = -1;
  const push = (text: string, start: number, end: number) => {
    const joined = previousEnd >= 0 && /^\s*\+\s*$/.test(source.slice(previousEnd, start));
    if (joined) out[out.length - 1] += text;
    else out.push(text);
    previousEnd = end;
  };
  /** Scans from `i`; inside a template's `${`, stops at its closing brace. */
  const scan = (from: number, inSubstitution: boolean): number => {
    let i = from;
    let depth = 0;
    while (i < source.length) {
      const c = source[i]!;
      const next = source[i + 1];
      if (c === '/' && (next === '/' || next === '*')) {
        const end = source.indexOf(next === '/' ? '\n' : '*/', i + 2);
        i = end < 0 ? source.length : end + (next === '/' ? 1 : 2);
      } else if (c === '/' && BEFORE_REGEX.test(source.slice(Math.max(0, i - 8), i).trimEnd())) {
        let inClass = false;
        for (i++; i < source.length && source[i] !== '\n'; i++) {
          if (source[i] === '\\') i++;
          else if (source[i] === '[') inClass = true;
          else if (source[i] === ']') inClass = false;
          else if (source[i] === '/' && !inClass) break;
        }
        i++;
      } else if (c === "'" || c === '"') {
        let j = i + 1;
        while (j < source.length && source[j] !== c && source[j] !== '\n')
          j += source[j] === '\\' ? 2 : 1;
        if (source[j] === c) push(unescape(source.slice(i + 1, j)), i, j + 1);
        i = j + 1;
      } else if (c === '`') {
        let j = i + 1;
        let plain = true;
        while (j < source.length && source[j] !== '`') {
          if (source[j] === '\\') j += 2;
          else if (source[j] === '$' && source[j + 1] === '{') {
            plain = false;
            j = scan(j + 2, true);
          } else j++;
        }
        if (plain) push(unescape(source.slice(i + 1, j)), i, j + 1);
        i = j + 1;
      } else if (inSubstitution && c === '{') {
        depth++;
        i++;
      } else if (inSubstitution && c === '}') {
        if (depth === 0) return i + 1;
        depth--;
        i++;
      } else i++;
    }
    return i;
  };
  scan(0, false);
  return out;
}

/**
 * The literal as a policy: a variable (any type checks) beside unit-sized stand-ins for the
 * variables it reads, so that expressions written for a policy with variables compile alone.
 */
function asPolicy(expression: string): PolicyCode {
  const reads = [...new Set([...expression.matchAll(/\bvariables\.([A-Za-z_]\w*)/g)])].map(
    (m) => m[1]!,
  );
  return {
    variables: [
      ...[...new Set(reads)].map((name) => ({ name, expression: 'object.metadata.name' })),
      { name: 'expression_under_test', expression },
    ],
    validations: [{ expression: 'true' }],
  };
}

interface Tally {
  compiled: number;
  refused: string[];
}

function check(policies: Iterable<{ name: string; code: PolicyCode; settings?: unknown }>): Tally {
  const tally: Tally = { compiled: 0, refused: [] };
  for (const { name, code, settings } of policies) {
    const result = compilePolicy(code);
    if (!result.ok) continue;
    tally.compiled++;
    const problem = costProblem(result.policy, settings ?? null);
    if (problem) tally.refused.push(`${name}: ${problem}`);
  }
  return tally;
}

function* literalPolicies(file: string) {
  const seen = new Set<string>();
  for (const literal of stringLiterals(readFileSync(join(root, file), 'utf8'))) {
    if (literal.trim() === '' || seen.has(literal)) continue;
    seen.add(literal);
    yield { name: `${file}: ${literal.slice(0, 120)}`, code: asPolicy(literal) };
  }
}

/** Policy specs with inline validations, and their settings. */
function* specPolicies(name: string, objects: unknown[]) {
  for (const object of objects) {
    const o = object as { kind?: string; metadata?: { name?: string }; spec?: PolicyCode & {} };
    const spec = o?.spec as (PolicyCode & { settings?: unknown }) | undefined;
    if (o?.kind !== 'Policy' || !spec?.validations) continue;
    yield { name: `${name}: ${o.metadata?.name}`, code: spec, settings: spec.settings ?? {} };
  }
}

describe('the cost estimate on legitimate policies', () => {
  const files = SOURCES.flatMap((pattern) => globSync(pattern, { cwd: root }))
    .filter((file) => !HOSTILE.has(file))
    .sort();

  test('every expression written in the tests, the bench and the demo fits the budget', (t) => {
    const tally = check(files.flatMap((file) => [...literalPolicies(file)]));
    t.diagnostic(`${tally.compiled} distinct expressions in ${files.length} files`);
    assert.deepEqual(tally.refused, []);
    // About 500 when this was written; far fewer means the scan broke.
    assert.ok(tally.compiled > 400, `only ${tally.compiled} expressions found`);
  });

  test('the differential corpus against the apiserver is among them', (t) => {
    const file = 'test/integration/policy-server/vap-conformance.test.ts';
    assert.ok(files.includes(file));
    const tally = check(literalPolicies(file));
    t.diagnostic(`${tally.compiled} distinct expressions in ${file}`);
    assert.deepEqual(tally.refused, []);
    // 143 when this was written (every case's expressions; two regex cases do not compile).
    assert.ok(tally.compiled > 120, `only ${tally.compiled} expressions found in ${file}`);
  });

  test('the examples, the demo and the bench policy load with their settings', () => {
    const examples = globSync('examples/*.yaml', { cwd: root }).flatMap((file) =>
      parseAllDocuments(readFileSync(join(root, file), 'utf8')).map((d) => d.toJS() as unknown),
    );
    const tally = check([
      ...specPolicies('examples', examples),
      ...specPolicies('demo', demoManifests('http://127.0.0.1:1')),
      { name: 'bench', code: { validations: benchValidations.map((v) => ({ ...v })) } },
    ]);
    assert.deepEqual(tally.refused, []);
    // require-labels, deny-latest-tag, the demo's good policy, the bench policy (the others
    // have typos on purpose).
    assert.equal(tally.compiled, 4);
  });
});
