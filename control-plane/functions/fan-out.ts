// The fan-out function: a change that may touch every Policy of a server (a pod becoming
// Ready or going away, a ReplicaSet, the Deployment, the PolicyServer) enqueues one key,
// `fan-out/<server>`, and this job enqueues the keys of the server's Policies in bulk. The
// watcher's cost of such an event stays one enqueue whatever the number of policies, and a
// burst of them (10,000 pods created) coalesces into a few fan-outs.
import { done, requeueAfter } from '../queue/index.ts';
import { notSyncedDelayMs, ownName, serversOfChange } from './policy-keys.ts';
import type { ReconcileFunction } from './types.ts';

/** The functions whose keys a server's fan-out enqueues for each of its Policies. */
const perPolicy = ['policy', 'webhook'];

export const fanOut: ReconcileFunction = {
  name: 'fan-out',

  watches: [
    { kind: 'PolicyServer', names: ownName },
    // The server's own objects: any change of theirs may touch every one of its Policies.
    ...(['Deployment', 'ReplicaSet', 'Pod'] as const).map((kind) => ({
      kind,
      names: serversOfChange,
    })),
    // Read: the names of the server's Policies, kept with the Policies' projection.
    { kind: 'Policy' },
  ],

  async handle(name, ctx) {
    const policies = await ctx.store.policiesOfServer(name);
    if (!policies) return requeueAfter(notSyncedDelayMs);
    await ctx.enqueue(policies.flatMap((p) => perPolicy.map((fn) => `${fn}/${p}`)));
    return done();
  },
};
