// `cluster up` twice is a no-op and `cluster down` leaves no process behind. Uses a second,
// private cluster so the shared test cluster is untouched.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { down, status, up } from '../../../tooling/cluster/cluster.ts';

/** Every live process whose command line mentions dir (all cluster processes get paths under it). */
function processesUsing(dir: string): string[] {
  const ps = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return ps.split('\n').filter((line) => line.includes(dir) && !line.includes('ps -eo'));
}

test('cluster up is idempotent and cluster down stops every process', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-lifecycle-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const quiet = () => {};

  const first = await up(dir, quiet);
  try {
    const pids = Object.values(first.pids);
    assert.equal(
      pids.length,
      6,
      'etcd, apiserver, controller manager, scheduler, kwok and the node agent run',
    );
    assert.equal(processesUsing(dir).length, 6);

    const messages: string[] = [];
    const second = await up(dir, (line) => messages.push(line));
    assert.deepEqual(second.pids, first.pids, 'a second up starts nothing');
    assert.match(messages.join('\n'), /already running/);
    assert.equal((await status(dir)).healthy, true);
  } finally {
    await down(dir, quiet);
  }

  assert.deepEqual(processesUsing(dir), []);
  assert.equal((await status(dir)).running, false);
});
