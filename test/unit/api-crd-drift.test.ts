/**
 * The zod schemas in api/v1alpha1.ts (the source of the TypeScript types) and the
 * CRDs in deploy/crds must describe the same fields: same property names at every
 * depth, same types, required lists, enums and defaults.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Environment } from '@marcbachmann/cel-js';
import fc from 'fast-check';
import { parse } from 'yaml';
import { z } from 'zod';
import {
  actionsOf,
  POLICY_CODE_MESSAGE,
  POLICY_INLINE_ONLY_MESSAGE,
  policyRevisionSpecSchema,
  policyServerSpecSchema,
  policyServerStatusSchema,
  policySpecFieldsSchema,
  policySpecSchema,
  policyStatusSchema,
  VALIDATION_ACTIONS,
  VALIDATION_ACTIONS_DENY_WARN_MESSAGE,
  VALIDATION_ACTIONS_UNIQUE_MESSAGE,
} from '../../api/v1alpha1.ts';
import { crdFile, type SchemaNode } from '../fixtures/crd-schema.ts';

function crdSchema(file: string): SchemaNode {
  const crd = parse(crdFile(file));
  return crd.spec.versions[0].schema.openAPIV3Schema as SchemaNode;
}

function zodSchema(schema: z.ZodType): SchemaNode {
  return z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as SchemaNode;
}

/** Every difference between the two schemas, as "path: what differs". */
function differences(crd: SchemaNode, zod: SchemaNode, path: string): string[] {
  const out: string[] = [];
  const typeOf = (s: SchemaNode) =>
    s['x-kubernetes-int-or-string'] ||
    s.anyOf
      ?.map((a) => a.type)
      .sort()
      .join('|') === 'integer|string'
      ? 'int-or-string'
      : s.type;
  if (typeOf(crd) !== typeOf(zod))
    out.push(`${path}: type ${typeOf(crd)} in the CRD, ${typeOf(zod)} in zod`);
  if (JSON.stringify(crd.enum) !== JSON.stringify(zod.enum)) {
    out.push(
      `${path}: enum ${JSON.stringify(crd.enum)} in the CRD, ${JSON.stringify(zod.enum)} in zod`,
    );
  }
  if (JSON.stringify(crd.default) !== JSON.stringify(zod.default)) {
    out.push(
      `${path}: default ${JSON.stringify(crd.default)} in the CRD, ${JSON.stringify(zod.default)} in zod`,
    );
  }
  // Where both constrain a string by a pattern, it must be the same one.
  const same = (a: string, b: string) => new RegExp(a).source === new RegExp(b).source;
  if (crd.pattern !== undefined && zod.pattern !== undefined && !same(crd.pattern, zod.pattern))
    out.push(`${path}: pattern ${crd.pattern} in the CRD, ${zod.pattern} in zod`);
  const crdRequired = [...(crd.required ?? [])].sort();
  const zodRequired = [...(zod.required ?? [])].sort();
  if (JSON.stringify(crdRequired) !== JSON.stringify(zodRequired)) {
    out.push(`${path}: required ${crdRequired} in the CRD, ${zodRequired} in zod`);
  }
  const crdProps = Object.keys(crd.properties ?? {});
  const zodProps = Object.keys(zod.properties ?? {});
  for (const name of crdProps.filter((p) => !zodProps.includes(p)))
    out.push(`${path}.${name}: only in the CRD`);
  for (const name of zodProps.filter((p) => !crdProps.includes(p)))
    out.push(`${path}.${name}: only in zod`);
  for (const name of crdProps.filter((p) => zodProps.includes(p))) {
    out.push(...differences(crd.properties![name]!, zod.properties![name]!, `${path}.${name}`));
  }
  if (crd.items || zod.items) {
    if (!crd.items || !zod.items) out.push(`${path}[]: items in only one schema`);
    else out.push(...differences(crd.items, zod.items, `${path}[]`));
  }
  const crdMap =
    typeof crd.additionalProperties === 'object' ? crd.additionalProperties : undefined;
  const zodMap =
    typeof zod.additionalProperties === 'object' ? zod.additionalProperties : undefined;
  // A free-form object (settings) is preserve-unknown-fields in the CRD, record<unknown> in zod.
  if (crdMap && zodMap) out.push(...differences(crdMap, zodMap, `${path}{}`));
  else if (crdMap && !zodMap) out.push(`${path}{}: map values only typed in the CRD`);
  else if (
    zodMap &&
    Object.keys(zodMap).length > 0 &&
    !crd['x-kubernetes-preserve-unknown-fields']
  ) {
    out.push(`${path}{}: map values only typed in zod`);
  }
  return out;
}

describe('the zod schemas and the CRDs describe the same API', () => {
  const rows = [
    { name: 'Policy spec', file: 'policies.yaml', field: 'spec', schema: policySpecSchema },
    { name: 'Policy status', file: 'policies.yaml', field: 'status', schema: policyStatusSchema },
    {
      name: 'PolicyServer spec',
      file: 'policyservers.yaml',
      field: 'spec',
      schema: policyServerSpecSchema,
    },
    {
      name: 'PolicyServer status',
      file: 'policyservers.yaml',
      field: 'status',
      schema: policyServerStatusSchema,
    },
    {
      name: 'PolicyRevision spec',
      file: 'policyrevisions.yaml',
      field: 'spec',
      schema: policyRevisionSpecSchema,
    },
  ];
  for (const row of rows) {
    test(`${row.name} has the same fields, types, enums, defaults and required lists`, () => {
      const crd = crdSchema(row.file).properties?.[row.field];
      assert.ok(crd, `the CRD has no ${row.field}`);
      assert.deepEqual(differences(crd, zodSchema(row.schema), row.field), []);
    });
  }

  test('the comparison notices a field missing from zod', () => {
    const crd = crdSchema('policies.yaml').properties!['spec']!;
    const diffs = differences(crd, zodSchema(policySpecFieldsSchema.omit({ mode: true })), 'spec');
    assert.ok(diffs.includes('spec.mode: only in the CRD'), diffs.join('\n'));
  });

  test('the comparison notices a different pattern', () => {
    const crd = structuredClone(crdSchema('policies.yaml').properties!['spec']!);
    crd.properties!['variables']!.items!.properties!['name']!.pattern = '^[a-z]+$';
    const diffs = differences(crd, zodSchema(policySpecSchema), 'spec');
    assert.ok(
      diffs.some((d) => d.startsWith('spec.variables[].name: pattern')),
      diffs.join('\n'),
    );
  });

  test('the comparison notices a changed enum deep inside a list', () => {
    const crd = structuredClone(crdSchema('policies.yaml').properties!['spec']!);
    crd.properties!['rules']!.items!.properties!['scope']!.enum = ['Cluster'];
    const diffs = differences(crd, zodSchema(policySpecSchema), 'spec');
    assert.ok(
      diffs.some((d) => d.startsWith('spec.rules[].scope: enum')),
      diffs.join('\n'),
    );
  });
});

describe('a Policy names its code exactly once, in zod as in the CRD', () => {
  const base = {
    policyServer: 'default',
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
  };
  const validations = [{ expression: 'true' }];
  const source = { url: 'https://example.com/p.yaml', sha256: 'a'.repeat(64) };
  const rows: [string, Record<string, unknown>, string | undefined][] = [
    ['a module alone is valid', { module: 'sim://ok' }, undefined],
    ['validations alone are valid', { validations }, undefined],
    ['a source alone is valid', { source }, undefined],
    [
      'validations with variables and matchConditions are valid',
      {
        validations,
        variables: [{ name: 'x', expression: '1' }],
        matchConditions: [{ name: 'm', expression: 'true' }],
      },
      undefined,
    ],
    ['none of the three is refused', {}, POLICY_CODE_MESSAGE],
    [
      'module and validations are refused',
      { module: 'sim://ok', validations },
      POLICY_CODE_MESSAGE,
    ],
    ['validations and source are refused', { validations, source }, POLICY_CODE_MESSAGE],
    [
      'variables without validations are refused',
      { source, variables: [{ name: 'x', expression: '1' }] },
      POLICY_INLINE_ONLY_MESSAGE,
    ],
  ];
  for (const [name, spec, message] of rows) {
    test(name, () => {
      const parsed = policySpecSchema.safeParse({ ...base, ...spec });
      if (message === undefined) assert.ok(parsed.success, JSON.stringify(parsed.error?.issues));
      else
        assert.deepEqual(
          parsed.error?.issues.map((i) => i.message),
          [message],
        );
    });
  }

  test('the CRD refuses the same combinations with the same messages', () => {
    const rules = (
      crdSchema('policies.yaml').properties!['spec'] as {
        'x-kubernetes-validations': { message: string }[];
      }
    )['x-kubernetes-validations'].map((r) => r.message);
    assert.deepEqual(rules, [POLICY_CODE_MESSAGE, POLICY_INLINE_ONLY_MESSAGE]);
  });
});

describe('validationActions: zod and the CRD accept the same lists, with the same messages', () => {
  type ArrayNode = SchemaNode & { minItems?: number; maxItems?: number };
  const node = crdSchema('policies.yaml').properties!['spec']!.properties![
    'validationActions'
  ] as ArrayNode;
  const cel = new Environment({ homogeneousAggregateLiterals: false }).registerVariable(
    'self',
    'dyn',
  );

  /**
   * What the apiserver says of `list` under the CRD's schema: a size or enum error first (it
   * runs the CEL rules only on a value the schema accepts), else each failing rule's message.
   */
  function crdVerdict(list: string[]): string[] {
    if (list.length < (node.minItems ?? 0) || list.length > (node.maxItems ?? Infinity))
      return ['size'];
    if (list.some((a) => !node.items!.enum!.includes(a))) return ['enum'];
    return (node['x-kubernetes-validations'] ?? [])
      .filter(({ rule }) => cel.evaluate(rule, { self: list }) !== true)
      .map(({ rule, message }) => message ?? rule);
  }

  /** What zod says: the same categories, and the refinements' own messages. */
  function zodVerdict(list: string[]): string[] {
    const parsed = policySpecFieldsSchema.shape.validationActions.safeParse(list);
    if (parsed.success) return [];
    const codes = parsed.error.issues.map((i) => i.code);
    if (codes.includes('too_small') || codes.includes('too_big')) return ['size'];
    if (codes.includes('invalid_value')) return ['enum'];
    return parsed.error.issues.map((i) => i.message);
  }

  test('the CRD states both rules with the messages api/v1alpha1.ts gives', () => {
    assert.deepEqual(
      (node['x-kubernetes-validations'] ?? []).map((r) => r.message),
      [VALIDATION_ACTIONS_UNIQUE_MESSAGE, VALIDATION_ACTIONS_DENY_WARN_MESSAGE],
    );
    assert.deepEqual(node.items?.enum, [...VALIDATION_ACTIONS]);
  });

  test('examples: a repeat, Deny with Warn, too many, an unknown action', () => {
    const rows: [string[], string[]][] = [
      [['Deny'], []],
      [['Warn', 'Audit'], []],
      [['Audit', 'Deny'], []],
      [['Deny', 'Deny'], [VALIDATION_ACTIONS_UNIQUE_MESSAGE]],
      [['Warn', 'Deny'], [VALIDATION_ACTIONS_DENY_WARN_MESSAGE]],
      [[], ['size']],
      [['Deny', 'Audit', 'Audit'], ['size']],
      [['Log'], ['enum']],
    ];
    for (const [list, want] of rows) {
      assert.deepEqual(crdVerdict(list), want, `the CRD on ${JSON.stringify(list)}`);
      assert.deepEqual(zodVerdict(list), want, `zod on ${JSON.stringify(list)}`);
    }
  });

  test('any list of up to three actions (or a stray word) gets the same verdict from both', () => {
    const word = fc.constantFrom(...VALIDATION_ACTIONS, 'deny', 'Log');
    fc.assert(
      fc.property(fc.array(word, { maxLength: 3 }), (list) => {
        assert.deepEqual(zodVerdict(list), crdVerdict(list));
      }),
      { numRuns: 500 },
    );
  });

  test('without validationActions the deprecated mode decides: protect is [Deny], monitor [Warn]', () => {
    assert.deepEqual(actionsOf({ mode: 'protect' }), ['Deny']);
    assert.deepEqual(actionsOf({ mode: 'monitor' }), ['Warn']);
    assert.deepEqual(actionsOf({ mode: 'monitor', validationActions: ['Audit'] }), ['Audit']);
  });
});
