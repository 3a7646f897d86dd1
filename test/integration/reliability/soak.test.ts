// The soak, two minutes of it: operations mixed with worker, watcher and Redis faults.
import { test } from 'node:test';
import { soak } from '../../../bench/soak-scenario.ts';

test(
  'a 2-minute soak of operations and faults ends in the modelled state',
  { timeout: 240_000 },
  () => soak(2),
);
