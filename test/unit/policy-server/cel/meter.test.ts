// The runtime cost meter: every hostile shape of issue 34 stops at the budget, quickly; a
// legitimate policy answers as before, at a small and deterministic cost.
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { describe, test } from 'node:test';
import { REQUEST_COST_BUDGET } from '../../../../data-plane/cel/budget.ts';
import {
  compilePolicy,
  CostLimitExceeded,
  evaluatePolicy,
  type PolicyCode,
} from '../../../../data-plane/cel/index.ts';
import { deepWeight, installMeter } from '../../../../data-plane/cel/meter.ts';
import { compiled, createRequest } from './helpers.ts';

// As the policy server does (main.ts, eval-worker.ts): a catastrophic pattern falls back.
setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

type Variable = { name: string; expression: string };

/** v0 = first, vN = next(variables.v(N-1)), N up to `length`. */
function chain(first: string, next: (previous: string) => string, length = 30): Variable[] {
  return [
    { name: 'v0', expression: first },
    ...Array.from({ length }, (_, i) => ({
      name: `v${i + 1}`,
      expression: next(`variables.v${i}`),
    })),
  ];
}

/** The same chain in one expression: cel.bind(a0, first, cel.bind(a1, next(a0), ... last)). */
function bound(first: string, next: (previous: string) => string, last: string, length = 30) {
  let body = last.replaceAll('LAST', `a${length}`);
  for (let i = length; i >= 1; i--) body = `cel.bind(a${i}, ${next(`a${i - 1}`)}, ${body})`;
  return `cel.bind(a0, ${first}, ${body})`;
}

/** A second chain like `variables`, named w0...wN (two equal values that are not the same). */
const twin = (variables: Variable[]): Variable[] =>
  variables.map(({ name, expression }) => ({
    name: `w${name.slice(1)}`,
    expression: expression.replaceAll('variables.v', 'variables.w'),
  }));

const items = Array.from({ length: 1000 }, (_, i) => i);

const hostile: { name: string; code: PolicyCode; object?: unknown }[] = [
  {
    name: 'a list doubled 30 times through variables',
    code: {
      variables: chain('[object.metadata.name]', (v) => `${v} + ${v}`),
      validations: [{ expression: 'size(variables.v30) > 0' }],
    },
  },
  {
    name: 'the same chain read by a match condition',
    code: {
      variables: chain('[object.metadata.name]', (v) => `${v} + ${v}`),
      matchConditions: [{ name: 'big', expression: 'size(variables.v30) > 0' }],
      validations: [{ expression: 'true' }],
    },
  },
  {
    name: 'a list doubled 30 times through cel.bind',
    code: {
      validations: [
        { expression: bound('[object.metadata.name]', (v) => `${v} + ${v}`, 'size(LAST) > 0') },
      ],
    },
  },
  {
    name: 'a string doubled 30 times through variables',
    code: {
      variables: chain('object.metadata.name', (v) => `${v} + ${v}`),
      validations: [{ expression: 'size(variables.v30) > 0' }],
    },
  },
  {
    name: 'a string doubled 30 times through cel.bind',
    code: {
      validations: [
        { expression: bound('object.metadata.name', (v) => `${v} + ${v}`, 'size(LAST) > 0') },
      ],
    },
  },
  {
    name: 'bytes doubled 30 times through variables',
    code: {
      variables: chain('bytes(object.metadata.name)', (v) => `${v} + ${v}`),
      validations: [{ expression: 'size(variables.v30) > 0' }],
    },
  },
  {
    name: 'bytes doubled 30 times through cel.bind',
    code: {
      validations: [
        {
          expression: bound('bytes(object.metadata.name)', (v) => `${v} + ${v}`, 'size(LAST) > 0'),
        },
      ],
    },
  },
  {
    name: 'a replace chain that doubles each a',
    code: {
      variables: chain('object.metadata.name', (v) => `${v}.replace('a', 'aa')`),
      validations: [{ expression: 'size(variables.v30) > 0' }],
    },
    object: { metadata: { name: 'aaaa' } },
  },
  {
    name: 'a join chain that joins a string with itself',
    code: {
      variables: chain('object.metadata.name', (v) => `[${v}, ${v}].join(${v})`),
      validations: [{ expression: 'size(variables.v30) > 0' }],
    },
  },
  {
    name: 'a format chain',
    code: {
      variables: chain('object.metadata.name', (v) => `'%s%s'.format([${v}, ${v}])`),
      validations: [{ expression: 'size(variables.v30) > 0' }],
    },
  },
  {
    name: 'a strings.quote chain (each quote escaped again)',
    code: {
      variables: chain('object.metadata.name', (v) => `strings.quote(${v})`),
      validations: [{ expression: 'size(variables.v30) > 0' }],
    },
    object: { metadata: { name: '"' } },
  },
  {
    name: 'a map literal chain compared with an equal one (deep equality)',
    code: {
      variables: [
        ...chain('{"k": object.metadata.name}', (v) => `{"a": ${v}, "b": ${v}}`),
        ...twin(chain('{"k": object.metadata.name}', (v) => `{"a": ${v}, "b": ${v}}`)),
      ],
      validations: [{ expression: 'variables.v30 == variables.w30' }],
    },
  },
  {
    name: 'a map literal chain printed by format',
    code: {
      variables: chain('{"k": object.metadata.name}', (v) => `{"a": ${v}, "b": ${v}}`),
      validations: [{ expression: "'%s'.format([variables.v30]) != ''" }],
    },
  },
  {
    name: 'a nested list chain looked up with in',
    code: {
      variables: [
        ...chain('[object.metadata.name]', (v) => `[${v}, ${v}]`),
        ...twin(chain('[object.metadata.name]', (v) => `[${v}, ${v}]`)),
      ],
      validations: [{ expression: 'variables.v30 in [variables.w30]' }],
    },
  },
  {
    name: 'three nested comprehensions over a 1000-element list',
    code: {
      validations: [
        {
          expression:
            'object.items.all(a, object.items.all(b, object.items.all(c, a + b + c >= 0)))',
        },
      ],
    },
    object: { items },
  },
  {
    name: 'three nested maps over a 1000-element list',
    code: {
      validations: [
        {
          expression: 'size(object.items.map(a, object.items.map(b, object.items.map(c, c)))) > 0',
        },
      ],
    },
    object: { items },
  },
  {
    name: 'a catastrophic regular expression matched in a double loop',
    code: {
      validations: [
        {
          expression:
            "object.items.all(a, object.items.all(b, !'aaaaaaaaaaaaaaaaaaaaaaaa!'.matches('^(a+)+$')))",
        },
      ],
    },
    object: { items },
  },
  {
    name: 'an overrun inside exists, which catches errors, or-ed with true',
    code: {
      variables: chain('[object.metadata.name]', (v) => `${v} + ${v}`),
      validations: [{ expression: 'object.items.exists(i, size(variables.v30) > i) || true' }],
    },
    object: { metadata: { name: 'x' }, items },
  },
];

describe('the runtime cost meter', () => {
  for (const { name, code, object } of hostile) {
    test(`${name} stops with CostLimitExceeded at the budget, within 2 s`, () => {
      const policy = compiled(code);
      const request = createRequest(object ?? { metadata: { name: 'name-1' } });
      for (const failurePolicy of ['Fail', 'Ignore'] as const) {
        const started = performance.now();
        assert.throws(
          () => evaluatePolicy(policy, { request, params: null }, { failurePolicy }),
          (error) => {
            assert.ok(error instanceof CostLimitExceeded, String(error));
            assert.equal(error.budget, REQUEST_COST_BUDGET);
            assert.ok(error.used > REQUEST_COST_BUDGET);
            assert.equal(error.message, 'exceeded its runtime cost budget 10^7');
            return true;
          },
        );
        const took = performance.now() - started;
        assert.ok(took < 2000, `${failurePolicy}: stopped after ${took.toFixed(0)} ms`);
      }
    });
  }

  test('a smaller budget stops the same chain sooner', () => {
    const policy = compiled(hostile[0]!.code);
    const request = createRequest({ metadata: { name: 'x' } });
    assert.throws(
      () => evaluatePolicy(policy, { request, params: null }, { budget: 1000 }),
      (error) => error instanceof CostLimitExceeded && error.budget === 1000 && error.used > 1000,
    );
  });

  describe('on a legitimate policy (the bench policy)', () => {
    const bench: PolicyCode = {
      validations: [
        { expression: "has(object.metadata.labels) && 'app' in object.metadata.labels" },
        {
          expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
          message: 'images must not use the :latest tag',
        },
        {
          expression:
            "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'cpu' in c.resources.limits && 'memory' in c.resources.limits)",
        },
        {
          expression:
            'has(object.spec.securityContext) && has(object.spec.securityContext.runAsNonRoot) && object.spec.securityContext.runAsNonRoot == true',
        },
        { expression: "object.metadata.name.matches('^[a-z][a-z0-9-]{0,62}$')" },
        { expression: 'size(object.spec.containers) <= 4' },
      ],
    };
    const pod = (image: string) => ({
      metadata: { name: 'bench-1', labels: { app: 'bench' } },
      spec: {
        securityContext: { runAsNonRoot: true },
        containers: [{ name: 'app', image, resources: { limits: { cpu: '1', memory: '1Gi' } } }],
      },
    });

    test('the verdicts are those without a meter, at a small cost that is the same every time', () => {
      const policy = compiled(bench);
      const run = (image: string) =>
        evaluatePolicy(policy, { request: createRequest(pod(image)), params: null });
      const allowed = run('registry.example/app:1.0');
      assert.equal(allowed.allowed, true);
      assert.ok(allowed.cost > 10 && allowed.cost < 500, `cost ${allowed.cost}`);
      assert.equal(run('registry.example/app:1.0').cost, allowed.cost);
      const denied = run('registry.example/app:latest');
      assert.deepEqual(
        { ...denied, cost: 0 },
        {
          allowed: false,
          message: 'images must not use the :latest tag',
          reason: 'Invalid',
          code: 422,
          cost: 0,
        },
      );
      assert.ok(denied.cost < allowed.cost, 'a denial stops at the failing validation');
    });

    test('installing the meter again changes nothing (it counts once per node)', () => {
      const policy = compiled(bench);
      const request = createRequest(pod('a:1'));
      const before = evaluatePolicy(policy, { request, params: null }).cost;
      installMeter();
      installMeter();
      assert.equal(evaluatePolicy(policy, { request, params: null }).cost, before);
    });
  });

  describe('is never skipped as an expression error', () => {
    const overrun = 'size(variables.v30) > 0';
    const variables = chain('[object.metadata.name]', (v) => `${v} + ${v}`);
    const request = createRequest({ metadata: { name: 'x' } });
    const stops = (code: PolicyCode) =>
      assert.throws(
        () =>
          evaluatePolicy(compiled(code), { request, params: null }, { failurePolicy: 'Ignore' }),
        CostLimitExceeded,
      );

    test('failurePolicy Ignore does not skip a validation that runs past the budget', () => {
      stops({
        variables,
        validations: [{ expression: overrun }, { expression: 'false', message: 'later' }],
      });
    });

    test('a match condition past the budget ends the evaluation, even with Ignore', () => {
      stops({
        variables,
        matchConditions: [{ name: 'm', expression: overrun }],
        validations: [{ expression: 'true' }],
      });
    });

    test('a messageExpression past the budget does not fall back to the message', () => {
      stops({
        variables,
        validations: [
          { expression: 'false', message: 'static', messageExpression: `${overrun} ? 'a' : 'b'` },
        ],
      });
    });

    test('an ordinary runtime error is still skipped with Ignore', () => {
      const verdict = evaluatePolicy(
        compiled({ validations: [{ expression: 'object.nope == 1' }, { expression: 'true' }] }),
        { request, params: null },
        { failurePolicy: 'Ignore' },
      );
      assert.equal(verdict.allowed, true);
    });
  });

  test('weighs a value built by doubling in time linear in its parts', () => {
    let value: unknown[] = ['x'];
    for (let i = 0; i < 40; i++) value = [value, value];
    const started = performance.now();
    assert.ok(deepWeight(value) > 2 ** 40);
    assert.ok(performance.now() - started < 100);
  });

  test('its probe function is not visible to policies', () => {
    const result = compilePolicy({ validations: [{ expression: 'rollcallMeterProbe()' }] });
    assert.equal(result.ok, false);
  });
});
