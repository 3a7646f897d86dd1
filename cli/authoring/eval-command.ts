/**
 * `rollcall eval POLICY_FILE (OBJECT_FILE | --review REVIEW_FILE)`: one Policy against one
 * request, offline, on the policy server's own load path and engine. Prints the verdict, the
 * message, warnings, audit annotations, the expressions that ran with their results, and the
 * cost.
 *
 * Exit codes: 0 admitted (or the policy does not apply), 1 denied, 2 unusable input or a policy
 * that does not load (with the message a replica would report).
 */
import { parse as parseYaml } from 'yaml';
import { actionsOf } from '../../api/v1alpha1.ts';
import { formatCost, REQUEST_COST_BUDGET } from '../../data-plane/cel/budget.ts';
import { parseReview } from '../../data-plane/review.ts';
import { outputFormat, readCommandLine, stringOptions, type ParsedLine } from '../command-line.ts';
import type { StatusIo } from '../status.ts';
import { InputError, isRecord, objectsIn, readObjects, type SourceObject } from './documents.ts';
import { splitApiVersion, type KindResource } from './kinds.ts';
import { loadPolicy, policiesAmong, policyName, type LoadedPolicy } from './policies.ts';
import {
  attributesOfReview,
  bareNamespace,
  buildRequest,
  DEFAULT_USER,
  identity,
  isOperation,
  OPERATIONS,
  storedNamespace,
  type Operation,
} from './request.ts';
import { evaluateRequest, type Evaluation, type EvaluationInput } from './run-policy.ts';

export const EVAL_USAGE = `Usage: rollcall eval POLICY_FILE OBJECT_FILE [options]
       rollcall eval POLICY_FILE --review REVIEW_FILE [options]

Evaluates one Policy on one request, offline, as the policy server would: the same load
(schema, type check, cost estimate), the same engine, the same answer. OBJECT_FILE holds one
Kubernetes object ("-" reads standard input); REVIEW_FILE an admission.k8s.io/v1 AdmissionReview.

Options:
  --operation OP            ${OPERATIONS.join(', ')} (default CREATE); DELETE sends the object as oldObject
  --old FILE                the object before an UPDATE (default: OBJECT_FILE itself)
  --namespace-object FILE   the request's Namespace: its labels decide the namespaceSelector and
                            it is namespaceObject (without it: a Namespace with only its name
                            label, and the namespaceSelector is not checked)
  --user NAME               request.userInfo.username (default ${DEFAULT_USER.username})
  --groups A,B              request.userInfo.groups (default ${DEFAULT_USER.groups.join(',')})
  --params FILE             settings (params) to use instead of spec.settings (a YAML/JSON map)
  --policy NAME             the Policy to use when POLICY_FILE holds several
  --resource PLURAL         the object's resource when rollcall does not know its kind (e.g. widgets)
  --subresource NAME        a subresource request (e.g. status)
  -o, --output text|json    default text

Exit codes: 0 admitted (or the policy does not apply), 1 denied, 2 unusable input or a policy
that does not load (with the message a policy-server replica would report).
`;

/** What `-o json` prints. */
export interface EvalReport {
  policy: {
    name: string;
    generation: number;
    /** validationActions (from the deprecated `mode` when absent). */
    actions: string[];
    failurePolicy: string;
    file: string;
  };
  request: {
    operation: string;
    resource: string;
    namespace: string;
    name: string;
    userInfo: unknown;
  };
  /** pass, fail (denied, or would deny under Warn or Audit), skip (does not apply), error. */
  result: Evaluation['result'];
  allowed: boolean;
  message: string;
  reason?: string;
  code?: number;
  warnings: string[];
  auditAnnotations: Record<string, string>;
  expressions: { fieldPath: string; expression: string; value?: string; error?: string }[];
  cost: { measured: number | null; estimated: number; budget: number };
  notes: string[];
}

const EVAL_OPTIONS = {
  ...stringOptions(
    'review',
    'operation',
    'old',
    'namespace-object',
    'user',
    'groups',
    'params',
    'policy',
    'resource',
    'subresource',
  ),
  output: { type: 'string', short: 'o', default: 'text' },
} as const;

interface EvalOptions {
  policyFile: string;
  objectFile?: string;
  review?: string;
  operation: Operation;
  old?: string;
  namespaceObject?: string;
  user?: string;
  groups?: string;
  params?: string;
  policy?: string;
  resource?: string;
  subresource?: string;
  output: 'text' | 'json';
}

/** The options of a parsed command line; throws InputError. */
function evalOptions({ values, positionals }: ParsedLine<typeof EVAL_OPTIONS>): EvalOptions {
  const [policyFile, objectFile, ...extra] = positionals;
  if (!policyFile) throw new InputError('POLICY_FILE is required');
  if (extra.length > 0) throw new InputError(`unexpected arguments: ${extra.join(' ')}`);
  if ((objectFile === undefined) === (values.review === undefined))
    throw new InputError('give either OBJECT_FILE or --review REVIEW_FILE');
  const operation = (values.operation ?? 'CREATE').toUpperCase();
  if (!isOperation(operation))
    throw new InputError(
      `--operation must be one of ${OPERATIONS.join(', ')}, not "${values.operation}"`,
    );
  if (values.review !== undefined) {
    const objectOnly = ['operation', 'old', 'user', 'groups', 'resource', 'subresource'] as const;
    const given = objectOnly.filter((k) => values[k] !== undefined);
    if (given.length > 0)
      throw new InputError(
        `--${given.join(', --')} describe a request built from OBJECT_FILE; an AdmissionReview brings its own`,
      );
  }
  const output = outputFormat(values.output, ['text', 'json']);
  return {
    policyFile,
    ...(objectFile !== undefined ? { objectFile } : {}),
    ...(values.review !== undefined ? { review: values.review } : {}),
    operation,
    ...(values.old !== undefined ? { old: values.old } : {}),
    ...(values['namespace-object'] !== undefined
      ? { namespaceObject: values['namespace-object'] }
      : {}),
    ...(values.user !== undefined ? { user: values.user } : {}),
    ...(values.groups !== undefined ? { groups: values.groups } : {}),
    ...(values.params !== undefined ? { params: values.params } : {}),
    ...(values.policy !== undefined ? { policy: values.policy } : {}),
    ...(values.resource !== undefined ? { resource: values.resource } : {}),
    ...(values.subresource !== undefined ? { subresource: values.subresource } : {}),
    output,
  };
}

export async function runEval(argv: readonly string[], io: StatusIo): Promise<number> {
  const line = readCommandLine(
    argv,
    io,
    { name: 'eval', usage: EVAL_USAGE, options: EVAL_OPTIONS },
    evalOptions,
  );
  if ('exit' in line) return line.exit;
  const options = line.args;
  try {
    return await evaluate(options, io);
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    io.stderr(`rollcall eval: ${error.message}\n`);
    return 2;
  }
}

const read = (io: StatusIo) => (path: string) =>
  path === '-' ? io.readStdin() : io.readFile(path);

/** The one object of a file. */
async function oneObject(io: StatusIo, file: string): Promise<SourceObject> {
  const objects =
    file === '-' ? objectsIn(await io.readStdin(), 'stdin') : await readObjects(read(io), file);
  if (objects.length !== 1)
    throw new InputError(`${file}: expected one object, found ${objects.length}`);
  return objects[0] as SourceObject;
}

async function choosePolicy(io: StatusIo, options: EvalOptions): Promise<SourceObject> {
  const policies = policiesAmong(await readObjects(read(io), options.policyFile));
  if (policies.length === 0)
    throw new InputError(`${options.policyFile}: no rollcall.dev/v1alpha1 Policy in it`);
  if (options.policy !== undefined) {
    const chosen = policies.find((p) => policyName(p.value) === options.policy);
    if (!chosen)
      throw new InputError(
        `${options.policyFile}: no Policy named ${options.policy} (it has ${policies.map((p) => policyName(p.value)).join(', ')})`,
      );
    return chosen;
  }
  if (policies.length > 1)
    throw new InputError(
      `${options.policyFile} holds ${policies.length} Policies (${policies.map((p) => policyName(p.value)).join(', ')}): choose one with --policy`,
    );
  return policies[0] as SourceObject;
}

async function readSettings(io: StatusIo, file: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await read(io)(file);
  } catch (error) {
    throw new InputError(`--params ${file}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw new InputError(`--params ${file}: ${(error as Error).message.split('\n')[0]}`);
  }
  if (!isRecord(value)) throw new InputError(`--params ${file}: expected a map of settings`);
  return value;
}

async function evaluate(options: EvalOptions, io: StatusIo): Promise<number> {
  const source = await choosePolicy(io, options);
  const settings = options.params ? await readSettings(io, options.params) : undefined;
  const loaded = await loadPolicy(source, settings ? { settings } : {});
  if (!loaded.ok) {
    const generation = (source.value.metadata as { generation?: unknown }).generation ?? 1;
    io.stderr(
      `rollcall eval: policy ${loaded.name || '(unnamed)'} generation ${String(generation)} failed to load: ${loaded.message}\n`,
    );
    return 2;
  }
  const namespaceFile = options.namespaceObject
    ? (await oneObject(io, options.namespaceObject)).value
    : undefined;
  if (namespaceFile && namespaceFile.kind !== 'Namespace')
    throw new InputError(`--namespace-object ${options.namespaceObject}: not a Namespace`);

  const input = options.review
    ? await reviewInput(io, options.review, namespaceFile)
    : await objectInput(io, options, namespaceFile);
  const evaluation = evaluateRequest(loaded, input);
  const report = toReport(loaded, input, evaluation);
  io.stdout(options.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : text(report));
  return report.allowed ? 0 : 1;
}

function namespaceFor(
  name: string,
  given: Record<string, unknown> | undefined,
): Pick<EvaluationInput, 'namespaceObject' | 'namespaceKnown'> {
  if (name === '') return { namespaceObject: null, namespaceKnown: true };
  if (!given) return { namespaceObject: bareNamespace(name), namespaceKnown: false };
  const givenName = (given.metadata as { name?: unknown } | undefined)?.name;
  if (givenName !== name)
    throw new InputError(
      `--namespace-object is Namespace ${String(givenName)}, but the request is in namespace ${name}`,
    );
  return { namespaceObject: storedNamespace(given), namespaceKnown: true };
}

async function objectInput(
  io: StatusIo,
  options: EvalOptions,
  namespaceObject: Record<string, unknown> | undefined,
): Promise<EvaluationInput> {
  const object = (await oneObject(io, options.objectFile ?? '-')).value;
  const oldObject = options.old ? (await oneObject(io, options.old)).value : undefined;
  if (oldObject && options.operation !== 'UPDATE')
    throw new InputError(`--old goes with --operation UPDATE, not ${options.operation}`);
  const kinds: KindResource[] = [];
  if (options.resource) {
    const id = identity(object, options.objectFile ?? 'the object');
    kinds.push({
      group: splitApiVersion(id.apiVersion).group,
      kind: id.kind,
      resource: options.resource,
      scope: id.namespace ? 'Namespaced' : 'Cluster',
    });
  }
  const built = buildRequest(
    {
      operation: options.operation,
      object,
      oldObject,
      user: {
        username: options.user ?? DEFAULT_USER.username,
        groups: options.groups
          ? options.groups
              .split(',')
              .map((g) => g.trim())
              .filter(Boolean)
          : DEFAULT_USER.groups,
      },
      ...(options.subresource ? { subresource: options.subresource } : {}),
      kinds,
    },
    options.objectFile ?? 'the object',
  );
  const notes =
    built.kind.from === 'guessed'
      ? [
          `${built.kind.kind} is not a kind rollcall knows: requested as resource ${built.kind.resource} (${built.kind.scope}); say otherwise with --resource`,
        ]
      : [];
  return {
    request: built.request,
    attributes: built.attributes,
    ...namespaceFor(built.attributes.namespace, namespaceObject),
    notes,
  };
}

async function reviewInput(
  io: StatusIo,
  file: string,
  namespaceObject: Record<string, unknown> | undefined,
): Promise<EvaluationInput> {
  let value: unknown;
  try {
    value = parseYaml(await read(io)(file));
  } catch (error) {
    throw new InputError(`${file}: ${(error as Error).message.split('\n')[0]}`);
  }
  // The server's own check of a review.
  const parsed = parseReview(JSON.stringify(value ?? null));
  if (!parsed.ok) throw new InputError(`${file}: ${parsed.error}`);
  const attributes = attributesOfReview(parsed.request);
  return {
    request: parsed.request,
    attributes,
    ...namespaceFor(attributes.namespace, namespaceObject),
  };
}

function toReport(
  policy: LoadedPolicy,
  input: EvaluationInput,
  evaluation: Evaluation,
): EvalReport {
  const request = input.request;
  const a = input.attributes;
  const status = evaluation.response?.status;
  return {
    policy: {
      name: policy.name,
      generation: policy.generation,
      actions: actionsOf(policy.spec),
      failurePolicy: policy.spec.failurePolicy,
      file: policy.source.file,
    },
    request: {
      operation: a.operation,
      resource: [
        a.group || 'core',
        a.version,
        a.subresource ? `${a.resource}/${a.subresource}` : a.resource,
      ].join('/'),
      namespace: a.namespace,
      name: typeof request.name === 'string' ? request.name : '',
      userInfo: request.userInfo ?? null,
    },
    result: evaluation.result,
    allowed: evaluation.response ? evaluation.response.allowed : true,
    message: evaluation.message,
    ...(status?.reason ? { reason: status.reason } : {}),
    ...(status?.code ? { code: status.code } : {}),
    warnings: evaluation.warnings,
    auditAnnotations: evaluation.auditAnnotations,
    expressions: evaluation.trace.map((t) => ({
      fieldPath: t.fieldPath,
      expression: t.expression,
      ...t.result,
    })),
    cost: {
      measured: evaluation.cost ?? null,
      estimated: policy.estimatedCost,
      budget: REQUEST_COST_BUDGET,
    },
    notes: evaluation.notes,
  };
}

const VERDICT: Record<Evaluation['result'], string> = {
  pass: 'admitted',
  fail: 'denied',
  skip: 'admitted: the policy does not apply',
  error: 'denied: an expression failed',
};

function text(r: EvalReport): string {
  const verdict =
    r.result === 'fail' && r.allowed
      ? `admitted (validationActions ${r.policy.actions.join(',')}: it would deny)`
      : r.result === 'error' && r.allowed
        ? 'admitted (an expression failed, allowed by failurePolicy Ignore or by validationActions without Deny)'
        : VERDICT[r.result];
  const rows: [string, string][] = [
    [
      'policy',
      `${r.policy.name} (generation ${r.policy.generation}, validationActions ${r.policy.actions.join(',')}, failurePolicy ${r.policy.failurePolicy}) from ${r.policy.file}`,
    ],
    [
      'request',
      `${r.request.operation} ${r.request.resource} ${r.request.namespace ? `${r.request.namespace}/` : ''}${r.request.name}`,
    ],
    ['verdict', `${verdict}${r.code ? ` (${r.code} ${r.reason ?? ''})`.trimEnd() : ''}`],
    ['message', r.message || '-'],
    ['warnings', r.warnings.length ? r.warnings.join('\n') : 'none'],
    [
      'audit',
      // As the apiserver records them: each key prefixed with the webhook's name.
      Object.keys(r.auditAnnotations).length
        ? Object.entries(r.auditAnnotations)
            .map(([k, v]) => `${r.policy.name}.policies.rollcall.dev/${k}=${v}`)
            .join('\n')
        : 'none',
    ],
    [
      'cost',
      `${r.cost.measured === null ? 'not measured (the engine has no runtime meter yet)' : `${r.cost.measured} units`}; estimate at load ${formatCost(r.cost.estimated)} of the budget ${formatCost(r.cost.budget)}`,
    ],
  ];
  for (const note of r.notes) rows.push(['note', note]);
  const width = Math.max(...rows.map(([k]) => k.length));
  const indent = ' '.repeat(width + 2);
  const out = rows.map(([k, v]) => `${k.padEnd(width)}  ${v.split('\n').join(`\n${indent}`)}`);
  out.push(
    r.expressions.length === 0
      ? 'expressions: none ran'
      : 'expressions, in the order they finished:',
  );
  const fieldWidth = Math.max(0, ...r.expressions.map((e) => e.fieldPath.length));
  for (const e of r.expressions) {
    const result = e.error !== undefined ? `error: ${e.error}` : (e.value ?? '');
    out.push(`  ${e.fieldPath.padEnd(fieldWidth)}  ${result}`);
    out.push(`  ${' '.repeat(fieldWidth)}  ${oneLine(e.expression)}`);
  }
  return `${out.join('\n')}\n`;
}

const oneLine = (s: string) => {
  const flat = s.replace(/\s*\n\s*/g, ' ').trim();
  return flat.length <= 160 ? flat : `${flat.slice(0, 159)}…`;
};
