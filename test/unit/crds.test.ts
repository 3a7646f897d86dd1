/**
 * Offline checks of deploy/crds that catch what the API server would reject (a
 * non-structural schema) or silently get wrong (a printer column or CEL rule naming
 * a field that does not exist). The real apply is an integration test.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { parse } from 'yaml';

type Node = {
  type?: string;
  properties?: Record<string, Node>;
  items?: Node;
  additionalProperties?: Node | boolean;
  anyOf?: Node[];
  'x-kubernetes-int-or-string'?: boolean;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-validations'?: { rule: string; message?: string }[];
};

const read = (file: string) =>
  readFileSync(new URL(`../../deploy/crds/${file}`, import.meta.url), 'utf8');

function walk(node: Node, path: string, visit: (node: Node, path: string) => void): void {
  visit(node, path);
  for (const [name, child] of Object.entries(node.properties ?? {}))
    walk(child, `${path}.${name}`, visit);
  if (node.items) walk(node.items, `${path}[]`, visit);
  if (typeof node.additionalProperties === 'object')
    walk(node.additionalProperties, `${path}{}`, visit);
}

function resolve(root: Node, jsonPath: string): Node | undefined {
  // `.status.conditions[?(@.type=="Ready")].message` → status, conditions[], message
  const steps = jsonPath
    .replace(/\[\?\(.*?\)\]/g, '[]')
    .split('.')
    .filter(Boolean);
  let node: Node | undefined = root;
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
    columns: ['Server', 'Mode', 'Ready', 'Status', 'Age', 'Message'],
  },
  {
    file: 'policyservers.yaml',
    kind: 'PolicyServer',
    plural: 'policyservers',
    short: 'ps',
    columns: ['Replicas', 'Ready', 'Status', 'Image', 'Age', 'Message'],
  },
];

for (const { file, kind, plural, short, columns } of crds) {
  describe(`the ${kind} CRD`, () => {
    const text = read(file);
    const crd = parse(text);
    const version = crd.spec.versions[0];
    const root: Node = version.schema.openAPIV3Schema;

    test('is a cluster-scoped apiextensions.k8s.io/v1 CRD in the rollcall.dev group', () => {
      assert.equal(crd.apiVersion, 'apiextensions.k8s.io/v1');
      assert.equal(crd.metadata.name, `${plural}.rollcall.dev`);
      assert.equal(crd.spec.scope, 'Cluster');
      assert.equal(version.name, 'v1alpha1');
      assert.ok(version.served && version.storage);
    });

    test(`has the short name ${short}, the rollcall category and a status subresource`, () => {
      assert.deepEqual(crd.spec.names.shortNames, [short]);
      assert.deepEqual(crd.spec.names.categories, ['rollcall']);
      assert.deepEqual(version.subresources, { status: {} });
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
      assert.equal(
        printed.find((c) => c.name === 'Message')?.priority,
        1,
        'the message is for -o wide',
      );
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

test('the kustomization lists both CRDs', () => {
  const kustomization = parse(read('kustomization.yaml'));
  assert.deepEqual([...kustomization.resources].sort(), ['policies.yaml', 'policyservers.yaml']);
});
