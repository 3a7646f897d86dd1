// What importing a command's module loads from node_modules: what each command costs at start.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// Prints the packages under node_modules that importing the module in argv[1] resolves.
const listPackages = `
import { registerHooks } from 'node:module';
const urls = new Set();
registerHooks({ resolve: (specifier, context, next) => { const r = next(specifier, context); urls.add(r.url); return r; } });
await import(process.argv[1]);
const names = [...urls].map((u) => /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(u)?.[1]).filter(Boolean);
console.log(JSON.stringify([...new Set(names)].sort()));
`;

function packagesLoadedBy(module: string): string[] {
  const path = fileURLToPath(new URL(module, import.meta.url));
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', listPackages, path], {
    encoding: 'utf8',
  });
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout) as string[];
}

test('the roles commands do not load client-node: a watcher never needs it (~35 MiB)', () => {
  const loaded = packagesLoadedBy('../../cli/serve.ts');
  assert.ok(loaded.includes('bullmq'), `the hook saw the roles' imports: ${loaded.join(' ')}`);
  assert.ok(!loaded.includes('@kubernetes/client-node'), loaded.join(' '));
  assert.ok(!loaded.includes('undici'), loaded.join(' '));
});

for (const command of ['eval', 'test', 'lint', 'convert'])
  test(`rollcall ${command} loads only YAML, zod and the CEL library: no cluster client, so it starts fast and offline`, () => {
    assert.deepEqual(packagesLoadedBy(`../../cli/authoring/${command}-command.ts`), [
      '@marcbachmann/cel-js',
      'yaml',
      'zod',
    ]);
  });
