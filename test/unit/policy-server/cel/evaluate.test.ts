import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  EvaluationError,
  evaluatePolicy,
  type PolicyCode,
  type Verdict,
} from '../../../../data-plane/cel/index.ts';
import { compiled, createRequest, verdict } from './helpers.ts';

const cases: {
  name: string;
  code: PolicyCode;
  object?: unknown;
  params?: unknown;
  /** The verdict but its cost (checked apart). */
  want: Omit<Verdict, 'cost'>;
}[] = [
  {
    name: 'a true validation allows',
    code: { validations: [{ expression: "object.data.a == 'x'" }] },
    object: { data: { a: 'x' } },
    want: { allowed: true },
  },
  {
    name: 'a false validation denies with its message and reason Invalid (422)',
    code: { validations: [{ expression: "object.data.a == 'x'", message: 'a must be x' }] },
    object: { data: { a: 'y' } },
    want: { allowed: false, message: 'a must be x', reason: 'Invalid', code: 422 },
  },
  {
    name: 'without a message the denial names the expression, trimmed',
    code: { validations: [{ expression: "  object.data.a == 'x'\n" }] },
    object: { data: { a: 'y' } },
    want: {
      allowed: false,
      message: "failed expression: object.data.a == 'x'",
      reason: 'Invalid',
      code: 422,
    },
  },
  {
    name: 'messageExpression wins over message',
    code: {
      validations: [
        { expression: 'false', message: 'static', messageExpression: "'got ' + object.data.a" },
      ],
    },
    object: { data: { a: 'y' } },
    want: { allowed: false, message: 'got y', reason: 'Invalid', code: 422 },
  },
  {
    name: 'a blank messageExpression falls back to message',
    code: { validations: [{ expression: 'false', message: 'static', messageExpression: "'  '" }] },
    want: { allowed: false, message: 'static', reason: 'Invalid', code: 422 },
  },
  {
    name: 'a messageExpression with a line break falls back to message',
    code: {
      validations: [{ expression: 'false', message: 'static', messageExpression: "'a\\nb'" }],
    },
    want: { allowed: false, message: 'static', reason: 'Invalid', code: 422 },
  },
  {
    name: 'a failing messageExpression falls back to message',
    code: {
      validations: [
        { expression: 'false', message: 'static', messageExpression: "'x' + object.nope" },
      ],
    },
    want: { allowed: false, message: 'static', reason: 'Invalid', code: 422 },
  },
  {
    name: 'a failing messageExpression without message falls back to the default',
    code: { validations: [{ expression: 'false', messageExpression: "'x' + object.nope" }] },
    want: { allowed: false, message: 'failed expression: false', reason: 'Invalid', code: 422 },
  },
  {
    name: 'the reason sets the code (Forbidden 403)',
    code: { validations: [{ expression: 'false', message: 'no', reason: 'Forbidden' }] },
    want: { allowed: false, message: 'no', reason: 'Forbidden', code: 403 },
  },
  {
    name: 'the reason sets the code (Unauthorized 401)',
    code: { validations: [{ expression: 'false', message: 'no', reason: 'Unauthorized' }] },
    want: { allowed: false, message: 'no', reason: 'Unauthorized', code: 401 },
  },
  {
    name: 'the reason sets the code (RequestEntityTooLarge 413)',
    code: {
      validations: [{ expression: 'false', message: 'no', reason: 'RequestEntityTooLarge' }],
    },
    want: { allowed: false, message: 'no', reason: 'RequestEntityTooLarge', code: 413 },
  },
  {
    name: 'the first failing validation decides',
    code: {
      validations: [
        { expression: 'true', message: 'first' },
        { expression: 'false', message: 'second' },
        { expression: 'false', message: 'third' },
      ],
    },
    want: { allowed: false, message: 'second', reason: 'Invalid', code: 422 },
  },
  {
    name: 'a false match condition allows without validating',
    code: {
      matchConditions: [
        { name: 'a', expression: 'true' },
        { name: 'b', expression: "object.data.kind == 'checked'" },
      ],
      validations: [{ expression: 'false' }],
    },
    object: { data: { kind: 'other' } },
    want: { allowed: true, skipped: true },
  },
  {
    name: 'a false match condition wins over a failing one',
    code: {
      matchConditions: [
        { name: 'a', expression: 'object.nope' },
        { name: 'b', expression: 'false' },
      ],
      validations: [{ expression: 'false' }],
    },
    want: { allowed: true, skipped: true },
  },
  {
    name: 'true match conditions go on to the validations',
    code: {
      matchConditions: [{ name: 'a', expression: "object.data.kind == 'checked'" }],
      validations: [{ expression: 'false', message: 'checked' }],
    },
    object: { data: { kind: 'checked' } },
    want: { allowed: false, message: 'checked', reason: 'Invalid', code: 422 },
  },
  {
    name: 'variables chain and keep their types',
    code: {
      variables: [
        { name: 'n', expression: 'object.spec.replicas' },
        { name: 'twice', expression: 'variables.n * 2' },
      ],
      validations: [
        {
          expression: 'variables.twice <= 4',
          messageExpression: "'twice is ' + string(variables.twice)",
        },
      ],
    },
    object: { spec: { replicas: 3 } },
    want: { allowed: false, message: 'twice is 6', reason: 'Invalid', code: 422 },
  },
  {
    name: 'a variable is evaluated only when used (a failing one does not matter when unused)',
    code: {
      variables: [{ name: 'bad', expression: 'object.nope' }],
      validations: [{ expression: 'true || variables.bad' }],
    },
    want: { allowed: true },
  },
  {
    name: 'a variable may have any name, even one of JS objects',
    code: {
      variables: [
        { name: 'source', expression: '1' },
        { name: 'toString', expression: '2' },
      ],
      validations: [{ expression: 'variables.source + variables.toString == 3' }],
    },
    want: { allowed: true },
  },
  {
    name: "keys named 'constructor' and '__proto__' are ordinary data",
    code: {
      validations: [
        {
          expression:
            "object.data.a == '1' && size(object.data) == 3 && object.data.constructor == 'x' && '__proto__' in object.data && object.data.all(k, k != '')",
        },
      ],
    },
    object: JSON.parse('{"data":{"a":"1","constructor":"x","__proto__":"y"}}'),
    want: { allowed: true },
  },
  {
    name: 'params are the policy settings, integers as int64',
    code: {
      validations: [{ expression: 'object.spec.replicas <= params.max', message: 'too many' }],
    },
    object: { spec: { replicas: 5 } },
    params: { max: 3 },
    want: { allowed: false, message: 'too many', reason: 'Invalid', code: 422 },
  },
  {
    name: 'params is null without settings',
    code: { validations: [{ expression: 'params == null' }] },
    want: { allowed: true },
  },
  {
    name: 'oldObject is null on CREATE and request carries the AdmissionRequest',
    code: {
      validations: [
        {
          expression:
            "oldObject == null && request.operation == 'CREATE' && request.userInfo.username == 'alice' && 'dev' in request.userInfo.groups",
        },
      ],
    },
    want: { allowed: true },
  },
];

describe('evaluatePolicy', () => {
  for (const c of cases) {
    test(c.name, () => {
      const { cost, ...rest } = verdict(c.code, c.object ?? {}, c.params ?? null);
      assert.deepEqual(rest, c.want);
      assert.ok(Number.isInteger(cost) && cost > 0 && cost < 1000, `cost ${cost}`);
    });
  }

  test('namespaceObject is the namespace given, null when none', () => {
    const policy = compiled({
      validations: [
        { expression: "namespaceObject == null || namespaceObject.metadata.name == 'ns'" },
      ],
    });
    const request = createRequest({});
    assert.equal(evaluatePolicy(policy, { request, params: null }).allowed, true);
    const ns = { metadata: { name: 'ns' } };
    assert.equal(
      evaluatePolicy(policy, { request, params: null, namespaceObject: ns }).allowed,
      true,
    );
    const other = { metadata: { name: 'other' } };
    assert.equal(
      evaluatePolicy(policy, { request, params: null, namespaceObject: other }).allowed,
      false,
    );
  });

  test('a runtime error throws EvaluationError with the expression and its field path', () => {
    const policy = compiled({
      validations: [{ expression: 'true' }, { expression: "object.data.a == 'x'" }],
    });
    assert.throws(
      () => evaluatePolicy(policy, { request: createRequest({}), params: null }),
      (err: unknown) => {
        assert.ok(err instanceof EvaluationError);
        assert.equal(
          err.message,
          "expression 'object.data.a == 'x'' resulted in error: no such key: data",
        );
        assert.equal(err.fieldPath, 'spec.validations[1].expression');
        return true;
      },
    );
  });

  test('a failing match condition (none false) throws EvaluationError', () => {
    const policy = compiled({
      matchConditions: [{ name: 'm', expression: 'object.nope' }],
      validations: [{ expression: 'true' }],
    });
    assert.throws(
      () => evaluatePolicy(policy, { request: createRequest({}), params: null }),
      EvaluationError,
    );
  });

  test('a dyn expression that is not bool at run time is an error', () => {
    const policy = compiled({ validations: [{ expression: 'object.flag' }] });
    assert.throws(
      () => evaluatePolicy(policy, { request: createRequest({ flag: 'yes' }), params: null }),
      /must evaluate to bool, got string/,
    );
  });

  test('with failurePolicy Ignore a failing validation is skipped and a later false one still denies', () => {
    const policy = compiled({
      validations: [{ expression: 'object.nope' }, { expression: 'false', message: 'second' }],
    });
    const got = evaluatePolicy(
      policy,
      { request: createRequest({}), params: null },
      { failurePolicy: 'Ignore' },
    );
    assert.equal(got.message, 'second');
  });

  test('does not modify its input', () => {
    const object = { spec: { replicas: 3 } };
    const request = createRequest(object);
    const before = structuredClone(request);
    verdict({ validations: [{ expression: 'object.spec.replicas + 1 == 4' }] }, object);
    assert.deepEqual(request, before);
  });
});
