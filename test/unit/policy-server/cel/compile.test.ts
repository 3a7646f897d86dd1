import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compilePolicy, type PolicyCode } from '../../../../data-plane/cel/index.ts';

const one = (expression: string): PolicyCode => ({ validations: [{ expression }] });

const failures: { name: string; code: PolicyCode; errors: string[] }[] = [
  {
    name: 'an unknown variable names the field and the position',
    code: { validations: [{ expression: 'true' }, { expression: 'has(objekt.spec)' }] },
    errors: ["spec.validations[1].expression: undeclared reference to 'objekt' at 1:5"],
  },
  {
    name: 'a position counts lines and columns from 1',
    code: one('true &&\n  objekt.x'),
    errors: ["spec.validations[0].expression: undeclared reference to 'objekt' at 2:3"],
  },
  {
    name: 'a syntax error has a position',
    code: one('object.spec +'),
    errors: ['spec.validations[0].expression: Unexpected token: EOF at 1:14'],
  },
  {
    name: 'a validation must be bool',
    code: one('object.spec.replicas + 1'),
    errors: ['spec.validations[0].expression: must evaluate to bool, not int'],
  },
  {
    name: 'a messageExpression must be a string',
    code: { validations: [{ expression: 'true', messageExpression: '1' }] },
    errors: ['spec.validations[0].messageExpression: must evaluate to string, not int'],
  },
  {
    name: 'a messageExpression must be a string, not dyn (as the apiserver requires)',
    code: { validations: [{ expression: 'true', messageExpression: 'object.data.m' }] },
    errors: ['spec.validations[0].messageExpression: must evaluate to string, not dyn'],
  },
  {
    name: 'a match condition must be bool',
    code: {
      matchConditions: [{ name: 'm', expression: "'x'" }],
      validations: [{ expression: 'true' }],
    },
    errors: ['spec.matchConditions[0].expression: must evaluate to bool, not string'],
  },
  {
    name: 'wrong operand types are refused',
    code: one("1 + 'a' == 2"),
    errors: ['spec.validations[0].expression: no such overload: int + string at 1:1'],
  },
  {
    name: 'a variable may only use variables declared before it',
    code: {
      variables: [
        { name: 'a', expression: 'variables.b' },
        { name: 'b', expression: '1' },
      ],
      validations: [{ expression: 'true' }],
    },
    errors: ['spec.variables[0].expression: no such key: b at 1:11'],
  },
  {
    name: "a variable's checked type carries into later expressions",
    code: {
      variables: [{ name: 'n', expression: 'size(object.data)' }],
      validations: [{ expression: "variables.n + 'x' == 'y'" }],
    },
    errors: ['spec.validations[0].expression: no such overload: int + string at 1:1'],
  },
  {
    name: 'a duplicate variable name is refused',
    code: {
      variables: [
        { name: 'a', expression: '1' },
        { name: 'a', expression: '2' },
      ],
      validations: [{ expression: 'true' }],
    },
    errors: ['spec.variables[1].name: Duplicate value: "a"'],
  },
  {
    name: "a variable named 'constructor' is refused (the CEL library reads it on every value)",
    code: {
      variables: [{ name: 'constructor', expression: '1' }],
      validations: [{ expression: 'true' }],
    },
    errors: ['spec.variables[0].name: Invalid value: "constructor": a reserved name'],
  },
  {
    name: 'the ip library is unsupported and named',
    code: one("ip('10.0.0.1').family() == 4"),
    errors: [
      "spec.validations[0].expression: uses 'ip', a Kubernetes CEL library rollcall does not support (see docs/cel.md) at 1:1",
    ],
  },
  {
    name: 'the sets extension is unsupported and named',
    code: one('sets.contains([1, 2], [1])'),
    errors: [
      "spec.validations[0].expression: uses 'sets.contains', a Kubernetes CEL library rollcall does not support (see docs/cel.md) at 1:1",
    ],
  },
  {
    name: 'the authorizer is unsupported',
    code: one("authorizer.group('apps').resource('deployments').check('create').allowed()"),
    errors: [
      "spec.validations[0].expression: uses 'authorizer', a Kubernetes CEL library rollcall does not support (see docs/cel.md) at 1:1",
    ],
  },
  {
    name: 'semver and cidr are unsupported',
    code: one("isSemver('1.0.0') && cidr('10.0.0.0/8').containsIP('10.0.0.1')"),
    errors: [
      "spec.validations[0].expression: uses 'isSemver', a Kubernetes CEL library rollcall does not support (see docs/cel.md) at 1:1",
      "spec.validations[0].expression: uses 'cidr', a Kubernetes CEL library rollcall does not support (see docs/cel.md) at 1:22",
    ],
  },
  {
    name: 'two-variable comprehensions are unsupported',
    code: one('object.data.all(k, v, v != "")'),
    errors: [
      "spec.validations[0].expression: uses 'all(key, value, ...)', a Kubernetes CEL library rollcall does not support (see docs/cel.md) at 1:1",
    ],
  },
  {
    name: 'a literal regex with inline flags is refused at load',
    code: one("object.metadata.name.matches('(?i)^abc')"),
    errors: [
      `spec.validations[0].expression: regular expression "(?i)^abc" uses inline flags such as (?i), which rollcall's JavaScript regular expressions do not support at 1:30`,
    ],
  },
  {
    name: 'a literal regex JS cannot parse is refused at load',
    code: one("'x'.find('a(b') == ''"),
    errors: [
      'spec.validations[0].expression: invalid regular expression "a(b": Invalid regular expression: /a(b/: Unterminated group at 1:10',
    ],
  },
  {
    name: 'format on a literal list with a wrong clause type is refused at load, as cel-go does',
    code: one("'%f'.format([3]) == ''"),
    errors: [
      'spec.validations[0].expression: error during formatting: fixed-point clause can only be used on doubles, was given int at 1:1',
    ],
  },
  {
    name: 'an unknown reason is refused',
    code: { validations: [{ expression: 'true', reason: 'Teapot' }] },
    errors: [
      'spec.validations[0].reason: Unsupported value: "Teapot": supported values: Unauthorized, Forbidden, Invalid, RequestEntityTooLarge',
    ],
  },
  {
    name: 'a policy needs a validation',
    code: { validations: [] },
    errors: ['spec.validations: Required value: at least one validation is required'],
  },
];

describe('compilePolicy', () => {
  for (const c of failures) {
    test(`refuses: ${c.name}`, () => {
      const result = compilePolicy(c.code);
      assert.deepEqual(result.ok ? [] : result.errors, c.errors);
    });
  }

  test('refuses malformed code with the path of each bad field, without throwing', () => {
    const code = {
      validations: [{ expression: 1 }, null],
      variables: 'x',
    } as unknown as PolicyCode;
    const result = compilePolicy(code);
    assert.deepEqual(result.ok ? [] : result.errors, [
      'spec.validations[0].expression: Invalid input: expected string, received number',
      'spec.validations[1]: Invalid input: expected object, received null',
      'spec.variables: Invalid input: expected array, received string',
    ]);
  });

  test('uses the given field path (a source bundle has none)', () => {
    const result = compilePolicy(one('objekt'), 'source');
    assert.deepEqual(result.ok ? [] : result.errors, [
      "source.validations[0].expression: undeclared reference to 'objekt' at 1:1",
    ]);
  });

  test('collects every error and caps the list', () => {
    const code = { validations: Array.from({ length: 15 }, () => ({ expression: 'nope' })) };
    const result = compilePolicy(code);
    assert.equal(result.ok, false);
    if (result.ok) return;
    assert.equal(result.errors.length, 11);
    assert.equal(result.errors.at(-1), '... and 5 more errors');
  });

  test('accepts dyn results, optional syntax, cel.bind and every supported library', () => {
    const result = compilePolicy({
      variables: [{ name: 'q', expression: "quantity('1Gi')" }],
      matchConditions: [
        { name: 'm', expression: 'object.?metadata.?labels.orValue({}).size() >= 0' },
      ],
      validations: [
        { expression: 'object.spec.enabled' },
        { expression: "cel.bind(x, 2, x * x == 4) && variables.q.isGreaterThan(quantity('1M'))" },
        { expression: "url('https://x').getHost() == 'x' && isURL('/a')" },
        { expression: "'a-b'.replace('-', '_') == '%s'.format(['a_b']) && 'ab'.charAt(0) == 'a'" },
        { expression: "[1, 2].sum() == 3 && [1].isSorted() && 'abc'.find('b') == 'b'" },
      ],
    });
    assert.equal(result.ok, true, result.ok ? '' : result.errors.join('; '));
  });
});
