// Fills Node's compile cache (NODE_COMPILE_CACHE) with every module the roles can load, so
// that a role starts from it: no TypeScript stripping (its WebAssembly compiler is never
// loaded, 18 MiB) and no compiling (V8's code of every module is cached). The image runs it at
// build time (Dockerfile) and ships the cache read-only; the bench runs it before the roles.
// Node keys the cache by its version, the V8 flags that change code (not heap sizes) and the
// user id, so it is filled by the user that runs the roles.
import { readdirSync } from 'node:fs';
import { flushCompileCache, getCompileCacheDir } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The runtime's sources: what .dockerignore lets into the image. */
export const RUNTIME_DIRS = ['api', 'lib', 'control-plane', 'data-plane', 'cli', 'tooling/sim'];

const root = fileURLToPath(new URL('..', import.meta.url));

/** Every module of the runtime's sources, tests left out. */
function runtimeModules(): string[] {
  return RUNTIME_DIRS.flatMap((dir) =>
    readdirSync(join(root, dir), { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
      .map((f) => join(root, dir, f)),
  ).sort();
}

if (import.meta.main) {
  const dir = getCompileCacheDir();
  if (dir === undefined) {
    console.error('NODE_COMPILE_CACHE is not set: there is no cache to fill');
    process.exit(2);
  }
  const modules = runtimeModules().filter((file) => file !== import.meta.filename);
  const urls = [
    ...modules.map((file) => pathToFileURL(file).href),
    // Loaded only by `--install-crds` and a kubeconfig (lib/kube/api.ts).
    import.meta.resolve('@kubernetes/client-node'),
    import.meta.resolve('yaml'),
  ];
  // One module that imports them all: every one is compiled before any runs, as a role's are.
  // One by one, those loaded after data-plane/main.ts ran would be compiled under the V8 flag
  // it sets, and their code cache refused by every process that does not set it.
  const all = urls.map((url) => `import ${JSON.stringify(url)};`).join('\n');
  await import(`data:text/javascript,${encodeURIComponent(all)}`);
  flushCompileCache();
  console.log(`compile cache ${dir}: ${modules.length} modules and what they import`);
}
