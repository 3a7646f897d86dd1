/**
 * Offline checks of the two OpenReports CRDs in deploy/crds (openreports.io/v1alpha1 Report and
 * ClusterReport, written from the published Go types): their names, scope and printer columns
 * as upstream declares them, one schema for both kinds, the result enums equal to what rollcall
 * writes (api/audit.ts), and every Report of api/audit.ts's OpenReport shape valid under the
 * schema with no field the apiserver would prune. The real apiserver: test/integration/api/crds.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { parse } from 'yaml';
import {
  AUDIT_RESULTS,
  OPENREPORTS_API_VERSION,
  OPENREPORTS_GROUP,
  type OpenReport,
  type ReportResult,
} from '../../api/audit.ts';
import { crdManifests, installMode } from '../../control-plane/install-crds.ts';
import { crdFile, type SchemaNode } from '../fixtures/crd-schema.ts';

type Node = SchemaNode & { format?: string; 'x-kubernetes-map-type'?: string };
interface Crd {
  metadata: { name: string };
  spec: {
    group: string;
    scope: string;
    names: { kind: string; plural: string; shortNames: string[] };
    versions: {
      name: string;
      served: boolean;
      storage: boolean;
      subresources?: unknown;
      additionalPrinterColumns: {
        name: string;
        type: string;
        jsonPath: string;
        priority?: number;
      }[];
      schema: { openAPIV3Schema: Node };
    }[];
  };
}
const crd = (file: string) => parse(crdFile(file)) as Crd;
const report = crd('openreports-reports.yaml');
const clusterReport = crd('openreports-clusterreports.yaml');
const schemaOf = (c: Crd) => c.spec.versions[0]!.schema.openAPIV3Schema;

/** A schema without its descriptions: what validation and pruning depend on. */
function withoutDescriptions(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutDescriptions);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => k !== 'description')
      .map(([k, v]) => [k, withoutDescriptions(v)]),
  );
}

/**
 * What the apiserver would refuse (a wrong type, a missing required field, a value outside an
 * enum) or silently prune (a field the schema does not know), as "path: problem" lines.
 */
function problems(node: Node, value: unknown, path = ''): string[] {
  const at = path || '<root>';
  switch (node.type) {
    case 'string':
      if (typeof value !== 'string') return [`${at}: not a string`];
      if (node.enum && !node.enum.includes(value)) return [`${at}: ${value} not in the enum`];
      return [];
    case 'integer':
      return Number.isInteger(value) ? [] : [`${at}: not an integer`];
    case 'boolean':
      return typeof value === 'boolean' ? [] : [`${at}: not a boolean`];
    case 'array':
      if (!Array.isArray(value)) return [`${at}: not an array`];
      return value.flatMap((v, i) => problems(node.items!, v, `${path}[${i}]`));
    case 'object': {
      if (value === null || typeof value !== 'object' || Array.isArray(value))
        return [`${at}: not an object`];
      const fields = value as Record<string, unknown>;
      const out = (node.required ?? [])
        .filter((r) => !(r in fields))
        .map((r) => `${at}: ${r} is required`);
      for (const [k, v] of Object.entries(fields)) {
        const child = node.properties?.[k] ?? node.additionalProperties;
        if (typeof child === 'object') out.push(...problems(child, v, `${path}.${k}`));
        else if (path !== '.metadata') out.push(`${path}.${k}: unknown, pruned`);
      }
      return out;
    }
    default:
      return [`${at}: untyped schema node`];
  }
}

describe('the OpenReports CRDs', () => {
  const rows = [
    {
      c: report,
      name: 'reports.openreports.io',
      kind: 'Report',
      scope: 'Namespaced',
      short: 'reps',
    },
    {
      c: clusterReport,
      name: 'clusterreports.openreports.io',
      kind: 'ClusterReport',
      scope: 'Cluster',
      short: 'creps',
    },
  ];
  for (const { c, name, kind, scope, short } of rows) {
    test(`${kind}: ${name}, ${scope}, short name ${short}, v1alpha1 served and stored, no subresource`, () => {
      assert.equal(c.metadata.name, name);
      assert.equal(c.spec.group, OPENREPORTS_GROUP);
      assert.equal(`${c.spec.group}/${c.spec.versions[0]!.name}`, OPENREPORTS_API_VERSION);
      assert.equal(c.spec.scope, scope);
      assert.equal(c.spec.names.kind, kind);
      assert.deepEqual(c.spec.names.shortNames, [short]);
      assert.equal(c.spec.versions.length, 1);
      assert.ok(c.spec.versions[0]!.served && c.spec.versions[0]!.storage);
      assert.equal(c.spec.versions[0]!.subresources, undefined);
    });

    test(`${kind}: prints KIND and NAME (wide), PASS, FAIL, WARN, ERROR, SKIP and AGE, as upstream`, () => {
      const columns = c.spec.versions[0]!.additionalPrinterColumns.map(
        (col) => `${col.name} ${col.type} ${col.jsonPath} ${col.priority ?? 0}`,
      );
      assert.deepEqual(columns, [
        'Kind string .scope.kind 1',
        'Name string .scope.name 1',
        'Pass integer .summary.pass 0',
        'Fail integer .summary.fail 0',
        'Warn integer .summary.warn 0',
        'Error integer .summary.error 0',
        'Skip integer .summary.skip 0',
        'Age date .metadata.creationTimestamp 0',
      ]);
    });
  }

  test("install-crds applies rollcall's CRDs and only creates OpenReports' (another tool may own them)", () => {
    const modes = Object.fromEntries(
      crdManifests().map((c) => [c.metadata?.name ?? '', installMode(c)]),
    );
    assert.deepEqual(modes, {
      'clusterreports.openreports.io': 'create-if-absent',
      'policies.rollcall.dev': 'apply',
      'policyrevisions.rollcall.dev': 'apply',
      'policyservers.rollcall.dev': 'apply',
      'reports.openreports.io': 'create-if-absent',
    });
  });

  test('Report and ClusterReport have one schema', () => {
    assert.deepEqual(
      withoutDescriptions(schemaOf(clusterReport).properties),
      withoutDescriptions(schemaOf(report).properties),
    );
  });

  test("a result's values, the summary's keys and the status filter are rollcall's AUDIT_RESULTS", () => {
    const root = schemaOf(report).properties!;
    const result = root['results']!.items!.properties!;
    assert.deepEqual(result['result']!.enum, [...AUDIT_RESULTS]);
    assert.deepEqual(Object.keys(root['summary']!.properties!), [...AUDIT_RESULTS]);
    const limits = root['configuration']!.properties!['limits']!.properties!;
    assert.deepEqual(limits['statusFilter']!.items!.enum, [...AUDIT_RESULTS]);
    assert.deepEqual(result['severity']!.enum, ['critical', 'high', 'low', 'medium', 'info']);
    assert.deepEqual(root['results']!.items!.required, ['policy']);
  });

  test('the validator of this file notices a wrong enum, a missing policy and a misnamed field', () => {
    const schema = schemaOf(report);
    const base = { policy: 'p', result: 'pass', timestamp: { seconds: 1, nanos: 0 } };
    assert.deepEqual(problems(schema, { results: [base] }), []);
    assert.deepEqual(problems(schema, { results: [{ ...base, result: 'passed' }] }), [
      '.results[0].result: passed not in the enum',
    ]);
    assert.deepEqual(problems(schema, { results: [{ result: 'fail' }] }), [
      '.results[0]: policy is required',
    ]);
    assert.deepEqual(problems(schema, { results: [{ ...base, subjects: [] }] }), [
      '.results[0].subjects: unknown, pruned',
    ]);
  });

  const name = fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/);
  const resultArb: fc.Arbitrary<ReportResult> = fc.record(
    {
      source: fc.constant('rollcall'),
      policy: name,
      result: fc.constantFrom(...AUDIT_RESULTS),
      message: fc.string(),
      scored: fc.boolean(),
      timestamp: fc.record({
        seconds: fc.integer({ min: 0, max: 2 ** 40 }),
        nanos: fc.integer({ min: 0, max: 999_999_999 }),
      }),
      resources: fc.array(
        fc.record(
          {
            apiVersion: fc.constantFrom('v1', 'apps/v1'),
            kind: fc.constantFrom('ConfigMap', 'Deployment'),
            namespace: name,
            name,
            uid: fc.uuid(),
            resourceVersion: fc.nat().map(String),
          },
          { requiredKeys: [] },
        ),
        { maxLength: 2 },
      ),
      properties: fc.dictionary(name, fc.string(), { maxKeys: 3 }),
    },
    { requiredKeys: ['source', 'policy', 'result', 'timestamp', 'resources'] },
  );
  const reportArb = (kind: OpenReport['kind']): fc.Arbitrary<OpenReport> =>
    fc.record({
      apiVersion: fc.constant(OPENREPORTS_API_VERSION),
      kind: fc.constant(kind),
      metadata: fc.record({ name: name.map((n) => `rollcall-${n}`) }),
      source: fc.constant('rollcall'),
      summary: fc.record({
        pass: fc.nat(),
        fail: fc.nat(),
        warn: fc.nat(),
        error: fc.nat(),
        skip: fc.nat(),
      }),
      results: fc.array(resultArb, { maxLength: 5 }),
    });

  for (const [c, kind] of [
    [report, 'Report'],
    [clusterReport, 'ClusterReport'],
  ] as const) {
    test(`any ${kind} of api/audit.ts's OpenReport shape is valid and loses no field`, () => {
      fc.assert(
        fc.property(reportArb(kind), (r) => {
          assert.deepEqual(problems(schemaOf(c), r), []);
        }),
        { numRuns: 300 },
      );
    });
  }
});
