import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Rule } from '../../../api/v1alpha1.ts';
import { guessResource, resolveKind } from '../../../cli/authoring/kinds.ts';
import {
  admissionMatch,
  ruleMatches,
  type RequestAttributes,
} from '../../../cli/authoring/match.ts';

const request = (over: Partial<RequestAttributes> = {}): RequestAttributes => ({
  operation: 'CREATE',
  group: '',
  version: 'v1',
  resource: 'pods',
  subresource: '',
  namespace: 'team-a',
  object: { metadata: { labels: { app: 'web' } } },
  oldObject: null,
  ...over,
});

const rule = (over: Partial<Rule> = {}): Rule => ({
  operations: ['CREATE'],
  apiGroups: [''],
  apiVersions: ['v1'],
  resources: ['pods'],
  scope: '*',
  ...over,
});

describe('rules match as admissionregistration v1 says', () => {
  const cases: [string, Partial<Rule>, Partial<RequestAttributes>, boolean][] = [
    ['the same operation, group, version and resource', {}, {}, true],
    ['another operation', {}, { operation: 'UPDATE' }, false],
    ['operation *', { operations: ['*'] }, { operation: 'DELETE' }, true],
    ['another group', {}, { group: 'apps' }, false],
    ['apiGroups *', { apiGroups: ['*'] }, { group: 'apps' }, true],
    ['another version', {}, { version: 'v2' }, false],
    ['apiVersions *', { apiVersions: ['*'] }, { version: 'v2' }, true],
    ['resources * takes every resource', { resources: ['*'] }, { resource: 'configmaps' }, true],
    ['resources * leaves subresources out', { resources: ['*'] }, { subresource: 'status' }, false],
    ['pods leaves pods/status out', {}, { subresource: 'status' }, false],
    ['pods/* takes pods/status', { resources: ['pods/*'] }, { subresource: 'status' }, true],
    ['pods/* takes pods itself', { resources: ['pods/*'] }, {}, true],
    ['*/status takes pods/status', { resources: ['*/status'] }, { subresource: 'status' }, true],
    ['*/* takes everything', { resources: ['*/*'] }, { resource: 'x', subresource: 'y' }, true],
    ['scope Namespaced on a namespaced request', { scope: 'Namespaced' }, {}, true],
    [
      'scope Namespaced on a cluster-scoped one',
      { scope: 'Namespaced', resources: ['*'] },
      { namespace: '', resource: 'nodes' },
      false,
    ],
    [
      'scope Cluster on a cluster-scoped one',
      { scope: 'Cluster', resources: ['*'] },
      { namespace: '', resource: 'nodes' },
      true,
    ],
    [
      'scope Cluster takes a Namespace, whose request carries its own name',
      { scope: 'Cluster', resources: ['namespaces'] },
      { namespace: 'team-a', resource: 'namespaces' },
      true,
    ],
    [
      'scope Namespaced never takes a Namespace',
      { scope: 'Namespaced', resources: ['namespaces'] },
      { namespace: 'team-a', resource: 'namespaces' },
      false,
    ],
  ];
  for (const [name, r, a, expected] of cases)
    test(`${name}: ${expected ? 'matches' : 'does not match'}`, () => {
      assert.equal(ruleMatches(rule(r), request(a)), expected);
    });
});

describe('whether a Policy applies to a request', () => {
  const spec = { rules: [rule()], namespaceSelector: { matchLabels: { team: 'true' } } };

  test('the namespaces every rollcall webhook excludes are never sent', () => {
    const result = admissionMatch({ rules: [rule()] }, request({ namespace: 'kube-system' }));
    assert.deepEqual(result, {
      matched: false,
      reason:
        "rollcall's webhooks exclude namespace kube-system (rollcall-system, kube-system, kube-node-lease)",
    });
  });

  test('unknown namespace labels leave the namespaceSelector unchecked, and say so', () => {
    assert.deepEqual(admissionMatch(spec, request()), {
      matched: true,
      rule: 0,
      notes: [
        'namespace team-a: labels unknown (no Namespace object given), namespaceSelector not checked',
      ],
    });
  });

  test('known namespace labels decide', () => {
    assert.equal(
      admissionMatch(spec, request(), { namespaceLabels: { team: 'true' } }).matched,
      true,
    );
    assert.equal(admissionMatch(spec, request(), { namespaceLabels: {} }).matched, false);
  });

  test('a cluster-scoped object other than a Namespace is never left out by the namespaceSelector', () => {
    const nodes = { ...spec, rules: [rule({ resources: ['persistentvolumes'] })] };
    assert.equal(
      admissionMatch(nodes, request({ namespace: '', resource: 'persistentvolumes' })).matched,
      true,
    );
  });

  test('a Namespace being created is matched on its own labels', () => {
    const namespaces = { ...spec, rules: [rule({ resources: ['namespaces'] })] };
    const ns = (labels: Record<string, string>) =>
      request({
        resource: 'namespaces',
        namespace: 'new',
        object: { metadata: { name: 'new', labels } },
      });
    assert.equal(admissionMatch(namespaces, ns({ team: 'true' })).matched, true);
    assert.equal(admissionMatch(namespaces, ns({})).matched, false);
  });

  test('the objectSelector takes either the new or the old object', () => {
    const selected = {
      rules: [rule({ operations: ['*'] })],
      objectSelector: { matchLabels: { app: 'db' } },
    };
    assert.equal(admissionMatch(selected, request()).matched, false);
    const update = request({
      operation: 'UPDATE',
      object: { metadata: { labels: {} } },
      oldObject: { metadata: { labels: { app: 'db' } } },
    });
    assert.equal(admissionMatch(selected, update).matched, true);
    const deleted = request({
      operation: 'DELETE',
      object: null,
      oldObject: { metadata: { labels: { app: 'db' } } },
    });
    assert.equal(admissionMatch(selected, deleted).matched, true);
  });
});

describe('kinds and their resources', () => {
  test('common kinds come from the table with their group and scope', () => {
    assert.deepEqual(resolveKind('apps', 'Deployment', true), {
      group: 'apps',
      kind: 'Deployment',
      resource: 'deployments',
      scope: 'Namespaced',
      from: 'table',
    });
    assert.equal(resolveKind('', 'Namespace', false).scope, 'Cluster');
  });

  test('a declared kind wins over the table and the guess', () => {
    const declared = [
      { group: 'example.com', kind: 'Widget', resource: 'gadgets', scope: 'Cluster' as const },
    ];
    assert.equal(resolveKind('example.com', 'Widget', true, declared).resource, 'gadgets');
    assert.equal(resolveKind('example.com', 'Widget', true, declared).from, 'declared');
  });

  test('an unknown kind is guessed as client-go guesses', () => {
    assert.deepEqual(['Widget', 'Policy', 'Ingress', 'Endpoints'].map(guessResource), [
      'widgets',
      'policies',
      'ingresses',
      'endpoints',
    ]);
    assert.equal(resolveKind('example.com', 'Widget', false).scope, 'Cluster');
    assert.equal(resolveKind('example.com', 'Widget', true).from, 'guessed');
  });
});
