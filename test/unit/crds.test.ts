/**
 * Offline checks of deploy/crds that catch what the API server would reject (a
 * non-structural schema) or silently get wrong (a printer column or CEL rule naming
 * a field that does not exist). The real apply is an integration test.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { crdFile, type SchemaNode } from '../fixtures/crd-schema.ts';

function walk(
  node: SchemaNode,
  path: string,
  visit: (node: SchemaNode, path: string) => void,
): void {
  visit(node, path);
  for (const [name, child] of Object.entries(node.properties ?? {}))
    walk(child, `${path}.${name}`, visit);
  if (node.items) walk(node.items, `${path}[]`, visit);
  if (typeof node.additionalProperties === 'object')
    walk(node.additionalProperties, `${path}{}`, visit);
}

function resolve(root: SchemaNode, jsonPath: string): SchemaNode | undefined {
  // `.status.conditions[?(@.type=="Ready")].message` → status, conditions[], message
  const steps = jsonPath
    .replace(/\[\?\(.*?\)\]/g, '[]')
    .split('.')
    .filter(Boolean);
  let node: SchemaNode | undefined = root;
  for (const step of steps) {
    const name = step.replace(/\[\]$/, '');
    if (name === 'metadata' && node === root) return { type: 'object' };
    node = node?.properties?.[name];
    if (step.endsWith('[]')) node = node?.items;
  }
  return node;
}

const crds = [
  {
    file: 'policies.yaml',
    kind: 'Policy',
    plural: 'policies',
    short: 'pol',
    columns: ['Server', 'Mode', 'Ready', 'Status', 'Violations', 'Age', 'Message'],
    status: true,
  },
  {
    file: 'policyservers.yaml',
    kind: 'PolicyServer',
    plural: 'policyservers',
    short: 'ps',
    columns: ['Replicas', 'Ready', 'Status', 'Image', 'Age', 'Message'],
    status: true,
  },
  {
    file: 'policyrevisions.yaml',
    kind: 'PolicyRevision',
    plural: 'policyrevisions',
    short: 'polrev',
    columns: ['Policy', 'Generation', 'Age'],
    status: false,
  },
];

for (const { file, kind, plural, short, columns, status } of crds) {
  describe(`the ${kind} CRD`, () => {
    const text = crdFile(file);
    const crd = parse(text);
    const version = crd.spec.versions[0];
    const root: SchemaNode = version.schema.openAPIV3Schema;

    test('is a cluster-scoped apiextensions.k8s.io/v1 CRD in the rollcall.dev group', () => {
      assert.equal(crd.apiVersion, 'apiextensions.k8s.io/v1');
      assert.equal(crd.metadata.name, `${plural}.rollcall.dev`);
      assert.equal(crd.spec.scope, 'Cluster');
      assert.equal(version.name, 'v1alpha1');
      assert.ok(version.served && version.storage);
    });

    test(`has the short name ${short}, the rollcall category and ${status ? 'a' : 'no'} status subresource`, () => {
      assert.deepEqual(crd.spec.names.shortNames, [short]);
      assert.deepEqual(crd.spec.names.categories, ['rollcall']);
      assert.deepEqual(version.subresources, status ? { status: {} } : undefined);
    });

    test('uses no YAML anchors (kustomize and some tools do not expand them)', () => {
      assert.doesNotMatch(text, /[&*][A-Za-z]+\s*$/m);
    });

    test('has a structural schema: every field has a type', () => {
      const untyped: string[] = [];
      walk(root, '', (node, path) => {
        if (path === '.metadata') return;
        const special =
          node['x-kubernetes-int-or-string'] || node['x-kubernetes-preserve-unknown-fields'];
        if (!node.type && !special) untyped.push(path || '<root>');
        if (node.properties && typeof node.additionalProperties === 'object')
          untyped.push(`${path}: properties and additionalProperties`);
      });
      assert.deepEqual(untyped, []);
    });

    test(`prints the columns ${columns.join(', ')}, each naming a real field`, () => {
      const printed = version.additionalPrinterColumns as {
        name: string;
        jsonPath: string;
        priority?: number;
      }[];
      assert.deepEqual(
        printed.map((c) => c.name),
        columns,
      );
      for (const column of printed)
        assert.ok(resolve(root, column.jsonPath), `${column.name}: ${column.jsonPath}`);
      for (const wide of printed.filter((c) => c.name === 'Message' || c.name === 'Violations'))
        assert.equal(wide.priority, 1, `${wide.name} is for -o wide`);
    });

    test('CEL rules only name fields of the node they sit on', () => {
      const problems: string[] = [];
      walk(root, '', (node, path) => {
        for (const { rule, message } of node['x-kubernetes-validations'] ?? []) {
          if (!message) problems.push(`${path}: rule without a message`);
          const fields = [...rule.matchAll(/self\.([A-Za-z]+)/g)].map((m) => m[1] ?? '');
          for (const field of fields) {
            const known =
              field === 'metadata'
                ? path === ''
                : field in (node.properties ?? {}) ||
                  field === 'size' ||
                  field === 'all' ||
                  field === 'exists' ||
                  field === 'matches';
            if (!known)
              problems.push(`${path || '<root>'}: rule names unknown field self.${field}`);
          }
          let depth = 0;
          for (const ch of rule) depth += ch === '(' ? 1 : ch === ')' ? -1 : 0;
          if (depth !== 0) problems.push(`${path}: unbalanced parentheses in ${rule}`);
        }
      });
      assert.deepEqual(problems, []);
    });
  });
}

/** OpenReports' Report and ClusterReport, installed with rollcall's (openreports-crds.test.ts). */
const OPENREPORTS_FILES = ['openreports-reports.yaml', 'openreports-clusterreports.yaml'];

test('the kustomization lists every CRD', () => {
  const kustomization = parse(crdFile('kustomization.yaml'));
  assert.deepEqual(
    [...kustomization.resources].sort(),
    [...crds.map((c) => c.file), ...OPENREPORTS_FILES].sort(),
  );
});

test('Policies are selectable by spec.policyServer, a real field', () => {
  const version = parse(crdFile('policies.yaml')).spec.versions[0];
  assert.deepEqual(version.selectableFields, [{ jsonPath: '.spec.policyServer' }]);
  assert.equal(resolve(version.schema.openAPIV3Schema, '.spec.policyServer')?.type, 'string');
});
