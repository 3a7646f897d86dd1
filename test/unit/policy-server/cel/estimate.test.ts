// The static cost estimate at load (docs/cel.md, "Cost"): hostile policies whose values grow
// are refused with the field path, the estimate and the budget; the estimate's size bound
// holds for what evaluating small random policies really gives.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import type { ASTNode } from '@marcbachmann/cel-js';
import fc from 'fast-check';
import { Activation } from '../../../../data-plane/cel/activation.ts';
import { REQUEST_COST_BUDGET } from '../../../../data-plane/cel/budget.ts';
import { deepSize, ESTIMATED_FUNCTIONS } from '../../../../data-plane/cel/estimate.ts';
import {
  compilePolicy,
  compileWithinBudget,
  costProblem,
  estimateCost,
  type CompiledPolicy,
  type PolicyCode,
} from '../../../../data-plane/cel/index.ts';
import { neededLoads } from '../../../../data-plane/lifecycle.ts';
import { loadNeed } from '../../../../data-plane/load.ts';
import { compiled, createRequest } from './helpers.ts';

/** 31 variables: v0 = `first`, vN = step(`variables.v(N-1)`). */
const chain = (first: string, step: (previous: string) => string, length = 31) =>
  Array.from({ length }, (_, i) => ({
    name: `v${i}`,
    expression: i === 0 ? first : step(`variables.v${i - 1}`),
  }));

/** `doublings` nested cel.bind names, each the previous one twice, read by `use`. */
const bindChain = (doublings: number, use: (last: string) => string): string => {
  let expression = use(`x${doublings}`);
  for (let i = doublings; i >= 1; i--)
    expression = `cel.bind(x${i}, x${i - 1} + x${i - 1}, ${expression})`;
  return `cel.bind(x0, [object.metadata.name], ${expression})`;
};

const readLast = { validations: [{ expression: 'size(variables.v30) > 0' }] };

/** The six variants of issue 34, each with the message that refuses it. */
const HOSTILE: [string, PolicyCode, string][] = [
  [
    'a 31-variable list doubling chain',
    { variables: chain('[object.metadata.name]', (p) => `${p} + ${p}`), ...readLast },
    'spec.variables[22].expression: estimated cost 2^24 exceeds the per-request budget 10^7',
  ],
  [
    'the same chain read by a matchCondition',
    {
      variables: chain('[object.metadata.name]', (p) => `${p} + ${p}`),
      matchConditions: [{ name: 'grown', expression: 'size(variables.v30) > 0' }],
      validations: [{ expression: 'true' }],
    },
    'spec.variables[22].expression: estimated cost 2^24 exceeds the per-request budget 10^7',
  ],
  [
    'a cel.bind chain of 24 doublings in one expression',
    { validations: [{ expression: bindChain(24, (last) => `size(${last}) > 0`) }] },
    'spec.validations[0].expression: estimated cost 10^8 exceeds the per-request budget 10^7',
  ],
  [
    'a string doubling chain',
    { variables: chain('object.metadata.name', (p) => `${p} + ${p}`), ...readLast },
    'spec.variables[23].expression: estimated cost 2^24 exceeds the per-request budget 10^7',
  ],
  [
    'a replace chain',
    { variables: chain('object.metadata.name', (p) => `${p}.replace('a', 'aa')`), ...readLast },
    'spec.variables[22].expression: estimated cost 1.3e7 exceeds the per-request budget 10^7',
  ],
  [
    'a join chain',
    { variables: chain('object.metadata.name', (p) => `[${p}, ${p}].join('')`), ...readLast },
    'spec.variables[21].expression: estimated cost 1.3e7 exceeds the per-request budget 10^7',
  ],
];

describe('the cost estimate at load', () => {
  for (const [name, code, message] of HOSTILE) {
    test(`${name} is refused with the field path, the estimate and the budget`, () => {
      assert.equal(costProblem(compiled(code), {}), message);
    });
  }

  test('a chain that reads its variables by index, optionally or through dyn is refused too', () => {
    const steps: [string, (n: number) => string][] = [
      ['index', (n) => `variables['v${n}']`],
      ['optional', (n) => `variables.?v${n}.value()`],
      ['dyn', (n) => `dyn(variables).v${n}`],
      ['bound', (n) => `cel.bind(vs, variables, vs.v${n})`],
    ];
    for (const [how, read] of steps) {
      const variables = Array.from({ length: 31 }, (_, i) => ({
        name: `v${i}`,
        expression: i === 0 ? 'object.metadata.name' : `${read(i - 1)} + ${read(i - 1)}`,
      }));
      const policy = compiled({ variables, validations: [{ expression: "variables.v30 != ''" }] });
      assert.match(
        costProblem(policy, {}) ?? '',
        /^spec\.variables\[\d+\]\.expression: estimated cost /,
        how,
      );
    }
  });

  test('a doubling chain’s estimated size doubles with each variable, as its value does', () => {
    const policy = compiled({
      variables: chain('[object.metadata.name]', (p) => `${p} + ${p}`, 8),
      validations: [{ expression: 'true' }],
    });
    const sizes = estimateCost(policy, null).expressions.slice(0, 8);
    assert.deepEqual(
      sizes.map((e) => e.size),
      [2, 4, 8, 16, 32, 64, 128, 256],
    );
    // Each variable counts its own cost once, plus those it reads: about twice its size.
    const last = sizes.at(-1)!;
    assert.ok(last.cost > 2 * last.size && last.cost < 2.2 * last.size, String(last.cost));
  });

  test('the first variable over the budget is named, even when nothing reads it', () => {
    const problem = costProblem(
      compiled({
        variables: chain('object.metadata.name', (p) => `${p} + ${p}`, 25),
        validations: [{ expression: 'true' }],
      }),
      {},
    );
    assert.match(problem ?? '', /^spec\.variables\[23\]\.expression: estimated cost 2\^24 /);
  });

  test('a chain just under the budget loads', () => {
    const policy = compiled({
      variables: chain('object.metadata.name', (p) => `${p} + ${p}`, 22),
      validations: [{ expression: 'size(variables.v21) > 0' }],
    });
    assert.equal(costProblem(policy, {}), undefined);
    const last = estimateCost(policy, {}).expressions.at(-1)!;
    // The chain (2^22) and size() reading the last string (2^21).
    assert.ok(last.cost > 6e6 && last.cost <= REQUEST_COST_BUDGET, String(last.cost));
  });

  test('a match condition that doubles a value itself is named', () => {
    const code: PolicyCode = {
      matchConditions: [
        { name: 'cheap', expression: 'true' },
        { name: 'grown', expression: bindChain(24, (last) => `size(${last}) > 0`) },
      ],
      validations: [{ expression: 'true' }],
    };
    assert.match(
      costProblem(compiled(code), {}) ?? '',
      /^spec\.matchConditions\[1\]\.expression: estimated cost 10\^8 exceeds/,
    );
  });

  test('a messageExpression is estimated too', () => {
    const code: PolicyCode = {
      validations: [
        {
          expression: 'false',
          messageExpression: `string(${bindChain(24, (last) => `size(${last})`)})`,
        },
      ],
    };
    assert.match(
      costProblem(compiled(code), {}) ?? '',
      /^spec\.validations\[0\]\.messageExpression: estimated cost 10\^8 exceeds/,
    );
  });

  test('nested comprehensions over the settings are estimated with their real size', () => {
    const code: PolicyCode = {
      validations: [{ expression: 'params.items.all(a, params.items.exists(b, a == b))' }],
    };
    const items = (n: number) => ({ items: Array.from({ length: n }, (_, i) => `item-${i}`) });
    assert.equal(costProblem(compiled(code), items(100)), undefined);
    assert.match(
      costProblem(compiled(code), items(3000)) ?? '',
      /^spec\.validations\[0\]\.expression: estimated cost \S+ exceeds the per-request budget 10\^7$/,
    );
  });

  test('a loop over the settings that reads one element at a time stays linear', () => {
    // An allow-list of 20,000 registries checked against the request: linear in the settings.
    const registries = Array.from({ length: 20_000 }, (_, i) => `registry-${i}.example.com/`);
    const policy = compiled({
      validations: [
        {
          expression:
            'object.spec.containers.all(c, params.registries.exists(r, c.image.startsWith(r)))',
        },
      ],
    });
    assert.equal(costProblem(policy, { registries }), undefined);
  });

  test('a variable read by many expressions counts once in the request’s total', () => {
    const policy = compiled({
      variables: chain('object.metadata.name', (p) => `${p} + ${p}`, 22),
      validations: Array.from({ length: 10 }, () => ({ expression: "variables.v21 != ''" })),
    });
    const { expressions, total } = estimateCost(policy, {});
    const variable = expressions[21]!.cost;
    assert.ok(total < variable + 1000, `${total} against ${variable}`);
    assert.equal(costProblem(policy, {}), undefined);
  });

  test('expressions that fit one by one but not together are refused as a whole', () => {
    const policy = compiled({
      validations: Array.from({ length: 6 }, (_, i) => ({
        expression: `size(${bindChain(19, (last) => last)}) > ${i}`,
      })),
    });
    const { expressions, total } = estimateCost(policy, {});
    assert.ok(expressions.every((e) => e.cost <= REQUEST_COST_BUDGET));
    assert.ok(total > REQUEST_COST_BUDGET);
    assert.match(
      costProblem(policy, {}) ?? '',
      /^spec: estimated cost \S+ of all expressions together exceeds the per-request budget 10\^7$/,
    );
  });

  test('a smaller budget refuses sooner', () => {
    const policy = compiled({ validations: [{ expression: "object.metadata.name + 'x' != ''" }] });
    assert.equal(costProblem(policy, {}), undefined);
    assert.match(costProblem(policy, {}, 3) ?? '', /^spec\.validations\[0\]\.expression: /);
  });

  test('a replace whose literal does not grow the text keeps its size', () => {
    const policy = compiled({
      variables: chain('object.metadata.name + params.suffix', (p) => `${p}.replace('ab', 'c')`),
      validations: [{ expression: 'true' }],
    });
    const sizes = estimateCost(policy, { suffix: 'abab' }).expressions.map((e) => e.size);
    assert.deepEqual(new Set(sizes.slice(0, 31)), new Set([5]));
  });

  test('a chain of thousands of operators is estimated without running out of stack', () => {
    // The parser nests `a || b || ...` and `!!!x` as deep as they are long (its maxDepth of
    // 100 does not count them); the estimate folds them in a loop.
    const node = (op: string, args: unknown) => ({ op, args }) as unknown as ASTNode;
    let or = node('value', false);
    let not = node('value', true);
    let sum = node('.', [node('id', 'object'), 's']);
    for (let i = 0; i < 100_000; i++) {
      or = node('||', [or, node('value', false)]);
      not = node('!_', not);
      sum = node('+', [sum, node('.', [node('id', 'object'), 's'])]);
    }
    for (const ast of [or, not, sum]) {
      const expression = { source: '', fieldPath: 'spec.validations[0].expression' };
      const policy = {
        matchConditions: [],
        variables: [],
        validations: [{ expression: { ...expression, program: { ast } } }],
      } as unknown as CompiledPolicy;
      assert.ok(estimateCost(policy, {}).total > 100_000);
    }
    // As compiled: each prefix of the sum is copied once, about 1000²/2.
    const compiledSum = `size(${Array.from({ length: 1000 }, () => 'object.s').join(' + ')}) > 0`;
    const { total } = estimateCost(compiled({ validations: [{ expression: compiledSum }] }), {});
    assert.ok(total > 5e5 && total < 5.1e5, String(total));
  });

  test('the estimate has a rule for every function of the policy environment', () => {
    // Names registered by the CEL library and by data-plane/cel (read from their sources).
    const names = new Set<string>();
    const sources = [
      ...['functions', 'optional', 'macros'].map(
        (f) =>
          new URL(`../../../../node_modules/@marcbachmann/cel-js/lib/${f}.js`, import.meta.url),
      ),
      ...['strings', 'lists', 'regex', 'quantity', 'url', 'conversions'].map(
        (f) => new URL(`../../../../data-plane/cel/${f}.ts`, import.meta.url),
      ),
    ];
    for (const source of sources) {
      const text = readFileSync(source, 'utf8');
      for (const m of text.matchAll(
        /(?:Overload|registerFunction)\(\s*[`'](?:[\w.<>${}]+\.)?(\w+)\(/g,
      ))
        names.add(m[1]!);
    }
    assert.ok(names.size > 60, `only ${names.size} functions found`);
    assert.deepEqual(
      [...names].filter((n) => !ESTIMATED_FUNCTIONS.has(n)),
      [],
    );
  });
});

describe('loading a policy over budget', () => {
  const need = (spec: Record<string, unknown>) =>
    neededLoads(
      [
        {
          metadata: { name: 'p', uid: 'u', generation: 1 },
          spec: {
            policyServer: 'default',
            rules: [
              { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
            ],
            ...spec,
          },
        },
      ],
      [],
    )[0]!.current;
  const doubling = {
    variables: chain('[object.metadata.name]', (p) => `${p} + ${p}`),
    validations: [{ expression: 'size(variables.v30) > 0' }],
  };

  test('an inline policy fails with the estimate and the budget', async () => {
    const outcome = await loadNeed(need(doubling), { compile: compileWithinBudget });
    assert.deepEqual(outcome, {
      state: 'Failed',
      message:
        'spec.variables[22].expression: estimated cost 2^24 exceeds the per-request budget 10^7',
      source: 'inline',
    });
  });

  test('a source document fails with its URL and document path', async () => {
    const url = 'https://bundles.example/doubling.yaml';
    const outcome = await loadNeed(need({ source: { url, sha256: '0'.repeat(64) } }), {
      compile: compileWithinBudget,
      fetch: async () => doubling,
    });
    assert.deepEqual(outcome, {
      state: 'Failed',
      message: `spec.source ${url}: document.variables[22].expression: estimated cost 2^24 exceeds the per-request budget 10^7`,
      source: 'url',
    });
  });

  test('the settings are the params the estimate sizes', async () => {
    const spec = {
      validations: [{ expression: 'params.items.all(a, params.items.exists(b, a == b))' }],
    };
    const items = (n: number) => Array.from({ length: n }, (_, i) => `item-${i}`);
    const small = await loadNeed(need({ ...spec, settings: { items: items(10) } }), {
      compile: compileWithinBudget,
    });
    assert.equal(small.state, 'Loaded');
    const large = await loadNeed(need({ ...spec, settings: { items: items(5000) } }), {
      compile: compileWithinBudget,
    });
    assert.equal(large.state, 'Failed');
  });

  test('a compile error is reported as before', () => {
    const result = compileWithinBudget({ validations: [{ expression: 'objekt.x' }] });
    assert.deepEqual(result, compilePolicy({ validations: [{ expression: 'objekt.x' }] }));
  });
});

// ------------------------------------------------------------------------- soundness, sampled

/** What a request of unit size holds: every value read from it has size 1. */
const UNIT_OBJECT = { s: 'a', n: 1, l: [], m: {} };
const SETTINGS = { word: 'ab', names: ['ab', 'c', ''], sep: '-' };

type Kind = 'string' | 'strings' | 'int' | 'any';
const literal = fc.stringMatching(/^[ab%-]{0,3}$/).map((s) => `'${s}'`);

/**
 * Random CEL of one kind, `depth` levels deep, with the variables declared before it and the
 * names bound around it. Memoized: building one level builds every production of the next.
 */
function cel(
  kind: Kind,
  depth: number,
  scope: { strings: string[]; lists: string[] },
): fc.Arbitrary<string> {
  const key = JSON.stringify([kind, depth, scope]);
  let arbitrary = arbitraries.get(key);
  if (!arbitrary) arbitraries.set(key, (arbitrary = build(kind, depth, scope)));
  return arbitrary;
}
const arbitraries = new Map<string, fc.Arbitrary<string>>();

function build(
  kind: Kind,
  depth: number,
  scope: { strings: string[]; lists: string[] },
): fc.Arbitrary<string> {
  const s = (d = depth - 1, sc = scope) => cel('string', d, sc);
  const ls = (d = depth - 1, sc = scope) => cel('strings', d, sc);
  const int = () => cel('int', depth - 1, scope);
  const any = () => cel('any', depth - 1, scope);
  const tuple = fc.tuple;
  const local = `x${depth}`;
  const withString = { ...scope, strings: [...scope.strings, local] };
  const withList = { ...scope, lists: [...scope.lists, local] };
  const leaves: Record<Kind, fc.Arbitrary<string>[]> = {
    string: [fc.constantFrom('object.s', 'params.word', 'params.sep', ...scope.strings), literal],
    strings: [fc.constantFrom('object.l', 'params.names', "['ab']", ...scope.lists)],
    int: [fc.constantFrom('object.n', '1')],
    any: [fc.constantFrom('object.s', 'object.m', 'object.l', 'object.n', 'params.names')],
  };
  if (depth <= 0) return fc.oneof(...leaves[kind]);
  const grow: Record<Kind, fc.Arbitrary<string>[]> = {
    string: [
      tuple(s(), s()).map(([a, b]) => `(${a} + ${b})`),
      tuple(s(), s(), s()).map(([a, b, c]) => `${a}.replace(${b}, ${c})`),
      tuple(s(), literal, s()).map(([a, b, c]) => `${a}.replace(${b}, ${c})`),
      s().map((a) => `${a}.lowerAscii()`),
      s().map((a) => `${a}.upperAscii()`),
      s().map((a) => `${a}.trim()`),
      s().map((a) => `${a}.reverse()`),
      s().map((a) => `${a}.substring(0)`),
      s().map((a) => `${a}.find('a+')`),
      s().map((a) => `strings.quote(${a})`),
      s().map((a) => `string(bytes(${a}))`),
      ls().map((a) => `${a}.join()`),
      tuple(ls(), s()).map(([a, b]) => `${a}.join(${b})`),
      tuple(any(), any(), int()).map(([a, b, c]) => `'%s|%s|%d'.format([${a}, ${b}, ${c}])`),
      s().map((a) => `'%x'.format([${a}])`),
      tuple(int(), int()).map(([a, b]) => `'%b %o %.2f %e'.format([${a}, ${b}, 1.5, 2.5])`),
      int().map((a) => `string(${a})`),
      tuple(int(), s(), s()).map(([c, a, b]) => `(${c} > 1 ? ${a} : ${b})`),
      tuple(s(), s(depth - 1, withString)).map(([v, body]) => `cel.bind(${local}, ${v}, ${body})`),
    ],
    strings: [
      tuple(s(), s()).map(([a, b]) => `[${a}, ${b}]`),
      tuple(ls(), ls()).map(([a, b]) => `(${a} + ${b})`),
      tuple(s(), s()).map(([a, b]) => `${a}.split(${b})`),
      s().map((a) => `${a}.findAll('a|b')`),
      tuple(ls(), s(depth - 1, withString)).map(([l, b]) => `${l}.map(${local}, ${b})`),
      tuple(ls(), s(depth - 1, withString)).map(
        ([l, b]) => `${l}.filter(${local}, ${local} != ${b})`,
      ),
      tuple(ls(), ls(depth - 1, withList)).map(([v, body]) => `cel.bind(${local}, ${v}, ${body})`),
    ],
    int: [s().map((a) => `size(${a})`), ls().map((a) => `size(${a})`)],
    any: [
      s(),
      ls(),
      tuple(s(), any()).map(([k, v]) => `{'k': ${v}, ${k} + 'k': 1}`),
      tuple(any(), any()).map(([a, b]) => `[${a}, ${b}]`),
      tuple(ls(), any()).map(([l, v]) => `${l}.map(${local}, [${local}, ${v}])`),
    ],
  };
  return fc.oneof(...leaves[kind], ...grow[kind]);
}

/** Up to 3 variables, each reading those before it, and a messageExpression reading them all. */
const smallPolicy = fc
  .array(fc.constantFrom<Kind>('string', 'strings', 'any'), { minLength: 1, maxLength: 3 })
  .chain((kinds) => {
    const arbitraries = kinds.map((kind, i) => {
      const before = kinds.slice(0, i);
      const names = (k: Kind) => before.flatMap((bk, j) => (bk === k ? [`variables.v${j}`] : []));
      return cel(kind, 3, { strings: names('string'), lists: names('strings') });
    });
    return fc.tuple(...arbitraries).map((expressions) => ({ kinds, expressions }));
  });

/** Values at the edges of the size rules: growing case maps, escapes, the widest clauses. */
const EDGE_VALUES = [
  "'ﬃ'.upperAscii()",
  "'İ'.lowerAscii()",
  "'ab'.replace('', 'xyz')",
  "'aaa'.replace('a', 'bcd', 2)",
  "strings.quote('\\a\\b\\\\')",
  "'%s'.format([['\\x01\\x02', 1.5e20, timestamp('0001-01-01T00:00:00.123Z')]])",
  "'%x'.format([5e-324])",
  "'%X %x'.format(['😀é', b'\\xff'])",
  "'%.100f'.format([-1e20])",
  "'%b'.format([-9223372036854775807])",
  "'%s'.format([{'k': ['v'], 'l': {}}])",
  "'abc'.split('')",
  "''.split('')",
  "'aaa'.findAll('')",
  "'a,b,,c'.split(',', 3)",
  "bytes('😀é')",
  "b'abc'.base64()",
  "b'abc'.hex()",
  "string(b'\\xff\\xfe')",
  "'😀'.charAt(0)",
  'string(-5e-324)',
  "string(duration('-315576000000.999999999s'))",
  "string(timestamp('0001-01-01T00:00:00.999Z'))",
  'string(-9223372036854775807)',
  "url('https://a/b?x=1&x=2&&y&z=%41').getQuery()",
  "url('https://user@[fe80::1%25en0]:80/p').getHostname()",
  'bytes(\'{"a":[1,2,{}],"b":""}\').json()',
  "['ab', 'c'].join('--')",
  "[].join('--')",
  "optional.of('abc')",
  "optional.none().orValue('xy')",
  "{'a': 'bc', 'd': 'efg'}.d",
  "['a', 'bcd'].max()",
  "'%s'.format([object.s.split('')])",
  "'héllo'.reverse()",
  "' x '.trim()",
  "'abcdef'.substring(1, 4)",
  '[[1], [2, 3]].map(l, l + l)',
  "{'a': 1, 'b': 2}.filter(k, k != 'a')",
];

describe('the estimate’s sizes are upper bounds', () => {
  test('of each function at the edges of its rule', () => {
    const policy = compiled({
      variables: EDGE_VALUES.map((expression, i) => ({ name: `v${i}`, expression })),
      validations: [{ expression: 'true' }],
    });
    const bounds = estimateCost(policy, SETTINGS).expressions;
    const activation = new Activation(policy, {
      request: createRequest(UNIT_OBJECT),
      params: SETTINGS,
    });
    EDGE_VALUES.forEach((expression, i) => {
      const size = deepSize(activation.variable(`v${i}`));
      assert.ok(size <= bounds[i]!.size, `${expression}: size ${size} > bound ${bounds[i]!.size}`);
    });
  });

  test('of every variable of a random small policy, evaluated on a unit-sized request', () => {
    let evaluated = 0;
    fc.assert(
      fc.property(smallPolicy, ({ expressions }) => {
        const code: PolicyCode = {
          variables: expressions.map((expression, i) => ({ name: `v${i}`, expression })),
          validations: [{ expression: 'true' }],
        };
        const result = compilePolicy(code);
        if (!result.ok) throw new Error(`does not compile: ${result.errors.join('; ')}`);
        const { expressions: bounds } = estimateCost(result.policy, SETTINGS);
        const activation = new Activation(result.policy, {
          request: createRequest(UNIT_OBJECT),
          params: SETTINGS,
        });
        expressions.forEach((expression, i) => {
          let value: unknown;
          try {
            value = activation.variable(`v${i}`);
          } catch {
            return; // a run-time error (a duplicate map key): nothing to bound
          }
          evaluated++;
          const bound = bounds[i]!;
          assert.ok(
            deepSize(value) <= bound.size,
            `${expression}: size ${deepSize(value)} > bound ${bound.size}`,
          );
          assert.ok(Number.isFinite(bound.cost) && bound.cost >= 1);
        });
      }),
      { numRuns: 300 },
    );
    assert.ok(evaluated > 300, `only ${evaluated} values evaluated`);
  });
});
