// Fault helpers: an apiserver that can be restarted with the same arguments on the shared
// test cluster, and an etcd compaction. A Redis that can be killed and restarted empty is
// private-redis.ts.
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { apiserverReady, type ClusterState } from '../../tooling/cluster/cluster.ts';
import { processAlive } from '../../tooling/cluster/process.ts';

async function waitReady(state: ClusterState, timeoutMs = 90_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await apiserverReady(state))) {
    if (Date.now() > deadline)
      throw new Error(
        `kube-apiserver not ready ${timeoutMs / 1000} s after its restart; see ${join(state.dir, 'logs', 'kube-apiserver.log')}`,
      );
    await sleep(200);
  }
}

/**
 * Restarts only the kube-apiserver, with the arguments it runs with now, and records its new
 * pid in state.json so that `cluster down` still stops it. Every watch breaks. `whileDown`
 * runs with the apiserver stopped (e.g. to compact etcd).
 *
 * It is killed, not stopped: a stopping apiserver refuses new connections at once but holds
 * open watches until its 60 s shutdown deadline, and a minute of refused connections drives
 * the backoff of every client-go component (controller-manager, scheduler, kwok) to its cap
 * of 30 s, jittered up to 60 s; the test would then wait for kwok, not for rollcall.
 */
export async function restartApiserver(
  state: ClusterState,
  whileDown: () => Promise<void> = async () => {},
): Promise<void> {
  const pid = state.pids['kube-apiserver'];
  if (!pid) throw new Error('no kube-apiserver pid in the cluster state');
  const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
    .split('\0')
    .filter((a) => a !== '');
  const [binary, ...rest] = args;
  process.kill(pid, 'SIGKILL');
  while (processAlive(pid)) await sleep(50);
  await whileDown();
  const log = openSync(join(state.dir, 'logs', 'kube-apiserver.log'), 'a');
  const child = spawn(binary!, rest, { detached: true, stdio: ['ignore', log, log] });
  closeSync(log);
  child.unref();
  const stateFile = join(state.dir, 'state.json');
  const saved = JSON.parse(readFileSync(stateFile, 'utf8')) as ClusterState;
  saved.pids['kube-apiserver'] = child.pid;
  writeFileSync(stateFile, JSON.stringify(saved, null, 2));
  state.pids['kube-apiserver'] = child.pid;
  await waitReady(state);
}

/** etcd's current revision and a compaction to it: every older resourceVersion now answers 410 Gone. */
export async function compactEtcd(state: ClusterState): Promise<number> {
  const base = `http://127.0.0.1:${state.ports.etcd}`;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(base + path, { method: 'POST', body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`etcd ${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as { header?: { revision?: string } };
  };
  // A range on an absent key answers with the current revision in its header.
  const revision = Number(
    (await post('/v3/kv/range', { key: Buffer.from('rollcall-reliability').toString('base64') }))
      .header?.revision,
  );
  await post('/v3/kv/compaction', { revision, physical: true });
  return revision;
}
