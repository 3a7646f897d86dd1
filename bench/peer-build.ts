// Builds the controller-runtime peer (bench/peer, a Go module on the latest controller-runtime
// release) from the Go module proxy, as tooling/cluster/build.ts builds the cluster's binaries: once,
// cached under ~/.cache/rollcall/bin by the hash of its sources and the Go version.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { goBuild, goVersion } from '../tooling/cluster/build.ts';
import { cacheDir, repoRoot } from '../tooling/cluster/paths.ts';

const peerDir = join(repoRoot, 'bench', 'peer');

/** The path of the peer binary, built first when its sources changed (~3 min cold on 2 cores). */
export async function ensurePeer(log: (line: string) => void): Promise<string> {
  const go = goVersion();
  const hash = createHash('sha256').update(go);
  for (const file of readdirSync(peerDir)
    .filter((f) => /\.go$|^go\.(mod|sum)$/.test(f))
    .sort())
    hash.update(file).update(readFileSync(join(peerDir, file)));
  const outDir = join(cacheDir, 'bin', `bench-peer-${hash.digest('hex').slice(0, 12)}`);
  const peer = join(outDir, 'peer');
  if (existsSync(peer)) return peer;
  mkdirSync(outDir, { recursive: true });
  log(`building the controller-runtime peer (bench/peer) with ${go}`);
  await goBuild(
    ['build', '-trimpath', '-ldflags', '-s -w', '-o', `${peer}.partial`, '.'],
    peerDir,
    'peer',
    log,
  );
  renameSync(`${peer}.partial`, peer);
  return peer;
}
