// What the audit may watch, from a discovery document: top-level resources that can be listed
// and watched, never Events, guarded resources, rollcall's or the reports' own kinds.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { resourcesOf } from '../../../control-plane/watcher/discovery.ts';

const verbs = ['get', 'list', 'watch', 'create'];

test('subresources, unlistable kinds, Events and guarded resources are left out', () => {
  const core = resourcesOf('', 'v1', {
    resources: [
      { name: 'pods', kind: 'Pod', namespaced: true, verbs },
      { name: 'pods/status', kind: 'Pod', namespaced: true, verbs },
      { name: 'bindings', kind: 'Binding', namespaced: true, verbs: ['create'] },
      { name: 'events', kind: 'Event', namespaced: true, verbs },
      { name: 'nodes', kind: 'Node', namespaced: false, verbs },
      { name: 'namespaces', kind: 'Namespace', namespaced: false, verbs },
    ],
  });
  assert.deepEqual(
    core.map((r) => r.resource),
    ['pods', 'namespaces'],
  );
  for (const group of ['rollcall.dev', 'openreports.io'])
    assert.deepEqual(
      resourcesOf(group, 'v1alpha1', {
        resources: [{ name: 'policies', kind: 'Policy', namespaced: false, verbs }],
      }),
      [],
    );
  assert.deepEqual(
    resourcesOf('coordination.k8s.io', 'v1', {
      resources: [{ name: 'leases', kind: 'Lease', namespaced: true, verbs }],
    }),
    [],
  );
});
