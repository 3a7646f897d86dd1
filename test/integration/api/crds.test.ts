// The CRDs on the real apiserver: printer columns, the category, explain, generation
// semantics. (Rejection of invalid objects: test/integration/reliability/invalid-specs.test.ts.)
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { kubectl } from '../../../tooling/cluster/cluster.ts';
import type { Policy } from '../../../api/v1alpha1.ts';
import { KubeWriter } from '../../../control-plane/functions/kube-writer.ts';
import { installCrds } from '../../../control-plane/install-crds.ts';
import { testCluster, testKubeConfig, uniqueName } from '../../support/kube.ts';

const kc = testKubeConfig();
const run = (...args: string[]) => kubectl(testCluster(), args);

describe('the rollcall CRDs on the apiserver', () => {
  const server = uniqueName('crd').slice(0, 40);
  const policy = uniqueName('crd-pol');

  before(async () => {
    await installCrds(kc, { info: () => {} });
    kubectl(
      testCluster(),
      ['apply', '-f', '-'],
      [
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'PolicyServer',
          metadata: { name: server },
          spec: { image: 'example.invalid/ps:1', replicas: 3 },
        },
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'Policy',
          metadata: { name: policy },
          spec: {
            policyServer: server,
            module: 'sim://ok',
            mode: 'monitor',
            rules: [
              { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
            ],
          },
        },
      ]
        .map((o) => stringify(o))
        .join('---\n'),
    );
  });

  after(() => {
    run('delete', 'policy', policy, '--ignore-not-found');
    run('delete', 'policyserver', server, '--ignore-not-found');
  });

  test('a status write shows in the printer columns, and does not bump the generation', async () => {
    const custom = kc.makeApiClient(CustomObjectsApi);
    const status = {
      observedGeneration: 1,
      ready: '2/3',
      summary: 'Reconciling',
      conditions: [
        {
          type: 'Ready',
          status: 'False',
          reason: 'Loading',
          message: 'generation 1 loaded on 2/3 replicas',
          observedGeneration: 1,
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    };
    const written = (await custom.patchClusterCustomObjectStatus(
      {
        group: 'rollcall.dev',
        version: 'v1alpha1',
        plural: 'policies',
        name: policy,
        body: { status },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    )) as { metadata: { generation: number } };
    assert.equal(written.metadata.generation, 1);

    const table = run('get', 'policies', policy);
    assert.match(table, /^NAME\s+SERVER\s+MODE\s+READY\s+STATUS\s+AGE\s*$/m);
    assert.match(
      table,
      new RegExp(`^${policy}\\s+${server}\\s+monitor\\s+2/3\\s+Reconciling\\s+\\S+\\s*$`, 'm'),
    );
    assert.match(
      run('get', 'policies', policy, '-o', 'wide'),
      /MESSAGE[\s\S]*generation 1 loaded on 2\/3 replicas/,
    );
    assert.match(run('get', 'pol', policy), new RegExp(policy), 'short name pol');
  });

  test('a status written against an older resourceVersion is refused, not applied', async () => {
    const custom = kc.makeApiClient(CustomObjectsApi);
    const read = (await custom.getClusterCustomObject({
      group: 'rollcall.dev',
      version: 'v1alpha1',
      plural: 'policies',
      name: policy,
    })) as Policy;
    const writer = new KubeWriter(kc, (write) => write());
    const status = (ready: string) => ({ ...read.status, ready });
    assert.equal(await writer.patchStatus('policies', policy, status('3/3'), read), true);
    // `read` is now one version behind, as a lagging projection would be.
    assert.equal(await writer.patchStatus('policies', policy, status('1/3'), read), false);
    assert.match(
      run('get', 'policies', policy),
      new RegExp(`^${policy}\\s+\\S+\\s+monitor\\s+3/3\\s`, 'm'),
    );
  });

  test('a spec change bumps the generation', () => {
    run('patch', 'policy', policy, '--type', 'merge', '-p', '{"spec":{"timeoutSeconds":5}}');
    assert.equal(run('get', 'policy', policy, '-o', 'jsonpath={.metadata.generation}'), '2');
  });

  test('PolicyServers print REPLICAS, READY, STATUS and IMAGE, and both kinds are in the rollcall category', () => {
    assert.match(run('get', 'ps', server), /^NAME\s+REPLICAS\s+READY\s+STATUS\s+IMAGE\s+AGE\s*$/m);
    const all = run('get', 'rollcall');
    assert.match(all, new RegExp(`policyserver.rollcall.dev/${server}`));
    assert.match(all, new RegExp(`policy.rollcall.dev/${policy}`));
  });

  test('Policies can be listed by spec.policyServer (the policy servers watch that way)', () => {
    const mine = run(
      'get',
      'policies',
      '--field-selector',
      `spec.policyServer=${server}`,
      '-o',
      'name',
    );
    assert.equal(mine.trim(), `policy.rollcall.dev/${policy}`);
    const none = run(
      'get',
      'policies',
      '--field-selector',
      'spec.policyServer=nobody',
      '-o',
      'name',
    );
    assert.equal(none.trim(), '');
  });

  test('a CEL Policy and a PolicyServer without an image are accepted', () => {
    const out = kubectl(
      testCluster(),
      ['apply', '--dry-run=server', '-f', '-'],
      [
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'PolicyServer',
          metadata: { name: `${server}-own` },
          spec: { replicas: 2 },
        },
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'Policy',
          metadata: { name: `${policy}-cel` },
          spec: {
            policyServer: server,
            rules: [
              { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
            ],
            variables: [{ name: 'labels', expression: 'object.metadata.?labels.orValue({})' }],
            matchConditions: [
              { name: 'not-system', expression: "request.namespace != 'kube-system'" },
            ],
            validations: [
              {
                expression: "'team' in variables.labels",
                messageExpression: "'pod ' + object.metadata.name + ' has no team label'",
                reason: 'Forbidden',
              },
            ],
            settings: { team: 'required' },
          },
        },
      ]
        .map((o) => stringify(o))
        .join('---\n'),
    );
    assert.match(out, /policyserver.rollcall.dev\/\S+-own created \(server dry run\)/);
    assert.match(out, /policy.rollcall.dev\/\S+-cel created \(server dry run\)/);
  });

  test('a PolicyRevision records one generation and cannot be changed into another', () => {
    const name = `${policy}-1`;
    const revision = (generation: number) =>
      stringify({
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'PolicyRevision',
        metadata: { name, labels: { 'rollcall.dev/policy': policy } },
        spec: { policy, policyUID: 'uid-1', generation, policySpec: { module: 'sim://ok' } },
      });
    kubectl(testCluster(), ['apply', '-f', '-'], revision(1));
    after(() => run('delete', 'polrev', name, '--ignore-not-found'));
    assert.match(run('get', 'polrev', name), new RegExp(`^${name}\\s+${policy}\\s+1\\s+`, 'm'));
    assert.throws(
      () => kubectl(testCluster(), ['apply', '-f', '-'], revision(2)),
      /records one generation of one Policy and is immutable/,
    );
    assert.match(run('get', 'rollcall'), new RegExp(`policyrevision.rollcall.dev/${name}`));
  });

  test('kubectl explain documents the fields', () => {
    const explained = run('explain', 'policy.spec.rules');
    assert.match(explained, /FIELD: rules/);
    assert.match(explained, /operations/);
    assert.match(run('explain', 'policyserver.spec'), /progressDeadlineSeconds/);
  });
});
