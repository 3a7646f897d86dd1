/**
 * A test suite, `rollcall-test.yaml`: the policies and resources it names (paths relative to
 * the suite, multi-document YAML), the kinds it declares, and the results it expects. Reading
 * one loads every policy as a replica would and indexes every resource by `Kind/namespace/name`
 * (or `Kind/name`); anything unusable is an InputError (the command exits 2).
 *
 * ```yaml
 * policies: [policies.yaml]
 * resources: [resources.yaml]          # Namespaces here give the namespaceSelector its labels
 * oldResources: [old.yaml]             # optional: the objects before an UPDATE
 * kinds:                               # optional: kinds rollcall does not know
 *   - { group: example.com, kind: Widget, resource: widgets, scope: Namespaced }
 * results:
 *   - policy: require-owner
 *     resource: ConfigMap/team-a/no-owner   # or a list of them
 *     operation: CREATE                     # default; UPDATE takes oldResource
 *     result: fail                          # pass | fail | skip | error
 *     message: need an owner                # optional substring
 * ```
 */
import { dirname, resolve } from 'node:path';
import { parse } from 'yaml';
import { z } from 'zod';
import { zodMessage } from '../../data-plane/lifecycle.ts';
import {
  InputError,
  isRecord,
  readObjects,
  readText,
  yamlErrorMessage,
  type ReadFile,
  type SourceObject,
} from './documents.ts';
import type { KindResource } from './kinds.ts';
import { loadPolicy, policiesAmong, policyName, type LoadedPolicy } from './policies.ts';
import { identity, OPERATIONS, refOf, storedNamespace } from './request.ts';

/** The name a suite file must have to be found in a directory. */
export const SUITE_FILE = 'rollcall-test.yaml';

export const RESULTS = ['pass', 'fail', 'skip', 'error'] as const;

const paths = z.array(z.string().min(1));
const ref = z
  .string()
  .regex(/^[^/\s]+\/[^/\s]+(\/[^/\s]+)?$/, 'expected Kind/namespace/name or Kind/name');

export const expectationSchema = z.strictObject({
  /** What the case is about, shown in the report. */
  name: z.string().optional(),
  policy: z.string().min(1),
  resource: z.union([ref, z.array(ref).min(1)]),
  operation: z.enum(OPERATIONS).default('CREATE'),
  /** UPDATE: the object before, in `oldResources` (or `resources`); default the resource itself. */
  oldResource: ref.optional(),
  /** Who makes the request (default rollcall-author, system:authenticated). */
  userInfo: z
    .strictObject({ username: z.string().min(1), groups: z.array(z.string()).default([]) })
    .optional(),
  result: z.enum(RESULTS),
  /** A substring of the denial (or error, or skip) message, or of a warning. */
  message: z.string().optional(),
});
export type Expectation = z.output<typeof expectationSchema>;

export const suiteSchema = z.strictObject({
  name: z.string().optional(),
  policies: paths.min(1),
  resources: paths.default([]),
  oldResources: paths.default([]),
  kinds: z
    .array(
      z.strictObject({
        group: z.string().default(''),
        kind: z.string().min(1),
        resource: z.string().min(1),
        scope: z.enum(['Namespaced', 'Cluster']).default('Namespaced'),
      }),
    )
    .default([]),
  results: z.array(expectationSchema).min(1),
});

/** One resource of a suite, by its reference. */
export interface SuiteResource {
  ref: string;
  object: Record<string, unknown>;
  source: SourceObject;
}

export interface Suite {
  file: string;
  name: string;
  policies: Map<string, LoadedPolicy>;
  resources: Map<string, SuiteResource>;
  oldResources: Map<string, SuiteResource>;
  /** Namespaces among the resources, by name. */
  namespaces: Map<string, Record<string, unknown>>;
  kinds: KindResource[];
  results: Expectation[];
}

/** `Kind/namespace/name` of an object as it is written (no namespace: `Kind/name`). */
function refOfObject(source: SourceObject): string {
  const id = identity(source.value, `${source.file}: document ${source.document}`);
  return refOf(
    id.kind,
    id.namespace,
    id.name || (source.value.metadata as { generateName?: string }).generateName || '',
  );
}

async function index(
  readFile: ReadFile,
  files: readonly string[],
  base: string,
): Promise<Map<string, SuiteResource>> {
  const byRef = new Map<string, SuiteResource>();
  for (const file of files) {
    for (const source of await readObjects(readFile, resolveFrom(base, file))) {
      const at = refOfObject(source);
      const earlier = byRef.get(at);
      if (earlier)
        throw new InputError(
          `${at} is in ${earlier.source.file} (document ${earlier.source.document}) and ${source.file} (document ${source.document}); name each resource once`,
        );
      byRef.set(at, { ref: at, object: source.value, source });
    }
  }
  return byRef;
}

const resolveFrom = (base: string, file: string) => resolve(base, file);

/** Reads and checks a suite, loading its policies; throws InputError. */
export async function readSuite(readFile: ReadFile, file: string): Promise<Suite> {
  const text = await readText(readFile, file);
  let raw: unknown;
  try {
    raw = parse(text, { maxAliasCount: 100 });
  } catch (error) {
    throw new InputError(yamlErrorMessage(error, file));
  }
  if (!isRecord(raw))
    throw new InputError(`${file}: not a suite (expected policies, resources, results)`);
  const parsed = suiteSchema.safeParse(raw);
  if (!parsed.success) throw new InputError(`${file}: ${zodMessage(parsed.error, '')}`);
  const spec = parsed.data;
  const base = dirname(file);

  const policies = new Map<string, LoadedPolicy>();
  for (const path of spec.policies) {
    const found = policiesAmong(await readObjects(readFile, resolveFrom(base, path)));
    if (found.length === 0)
      throw new InputError(`${file}: policies: ${path} holds no rollcall.dev/v1alpha1 Policy`);
    for (const source of found) {
      const loaded = await loadPolicy(source);
      const name = policyName(source.value) ?? '(unnamed)';
      if (!loaded.ok) {
        const generation = (source.value.metadata as { generation?: unknown }).generation ?? 1;
        throw new InputError(
          `policy ${name} (${source.file}) generation ${String(generation)} failed to load: ${loaded.message}`,
        );
      }
      if (policies.has(name))
        throw new InputError(
          `${file}: policy ${name} is defined twice (${policies.get(name)?.source.file}, ${source.file})`,
        );
      policies.set(name, loaded);
    }
  }
  const resources = await index(readFile, spec.resources, base);
  const oldResources = await index(readFile, spec.oldResources, base);
  const namespaces = new Map<string, Record<string, unknown>>();
  for (const r of resources.values())
    if (r.object.kind === 'Namespace' && r.object.apiVersion === 'v1')
      namespaces.set(identity(r.object, r.ref).name, storedNamespace(r.object));

  // Every reference must resolve before anything runs.
  spec.results.forEach((expectation, i) => {
    const at = `${file}: results[${i}]`;
    if (!policies.has(expectation.policy))
      throw new InputError(
        `${at}.policy: no policy ${expectation.policy} in ${spec.policies.join(', ')} (it has ${[...policies.keys()].join(', ')})`,
      );
    for (const r of [expectation.resource].flat())
      if (!resources.has(r))
        throw new InputError(
          `${at}.resource: ${r} is not in ${spec.resources.join(', ') || 'the resources (none given)'}`,
        );
    if (expectation.oldResource !== undefined) {
      if (expectation.operation !== 'UPDATE')
        throw new InputError(
          `${at}.oldResource: goes with operation UPDATE, not ${expectation.operation}`,
        );
      if (!oldResources.has(expectation.oldResource) && !resources.has(expectation.oldResource))
        throw new InputError(
          `${at}.oldResource: ${expectation.oldResource} is in neither oldResources nor resources`,
        );
    }
  });

  return {
    file,
    name: spec.name ?? file,
    policies,
    resources,
    oldResources,
    namespaces,
    kinds: spec.kinds,
    results: spec.results,
  };
}
