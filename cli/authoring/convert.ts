/**
 * Conversion between a rollcall Policy and Kubernetes' ValidatingAdmissionPolicy (VAP) with its
 * ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1), as pure functions:
 * policyToVap (convert-to-vap.ts) and vapToPolicies (convert-from-vap.ts). This module holds
 * what both directions share: the result's shape, the annotations a converted VAP carries, and
 * the settings variable both ways (`params` reads rewritten to `variables.<name>` and back, in
 * place in each expression's source).
 *
 * Whatever does not carry over is named: a `note` when the meaning is kept, `lost: true` when
 * it is not (the command then exits 1).
 */
import type { ASTNode } from '@marcbachmann/cel-js';
import { policyExpressions, type CompiledPolicy } from '../../data-plane/cel/index.ts';
import type { RollcallNamespaces } from './match.ts';

export const VAP_API_VERSION = 'admissionregistration.k8s.io/v1';
/** On a converted VAP: the variable that holds the Policy's settings. */
export const SETTINGS_VARIABLE_ANNOTATION = 'rollcall.dev/settings-variable';
/** On a converted VAP and binding: the Policy it came from. */
export const CONVERTED_FROM_ANNOTATION = 'rollcall.dev/converted-from';

export interface ConversionNote {
  /** The field it is about, e.g. `spec.timeoutSeconds`. */
  field: string;
  message: string;
  /** True when the meaning does not carry over. */
  lost: boolean;
}

export type Conversion =
  | { ok: true; objects: Record<string, unknown>[]; notes: ConversionNote[] }
  | { ok: false; errors: string[] };

export interface ConvertOptions extends RollcallNamespaces {
  /** VAP → Policy: the PolicyServer of the Policies (default `default`). */
  policyServer?: string;
}

// ---------------------------------------------------------------- CEL helpers

export const isNode = (v: unknown): v is ASTNode =>
  typeof v === 'object' && v !== null && 'op' in v;

/** `source` with each range replaced by `text`. */
function replaceRanges(source: string, ranges: readonly [number, number][], text: string): string {
  let out = source;
  for (const [start, end] of [...ranges].sort((a, b) => b[0] - a[0]))
    out = out.slice(0, start) + text + out.slice(end);
  return out;
}

/**
 * Rewrites the expressions of `policy`: `rewrite(fieldPath, source)` is the source with each
 * range that `find` returns in that expression's syntax tree replaced by `text`.
 */
function expressionRewriter(
  policy: CompiledPolicy,
  find: (ast: ASTNode) => [number, number][],
  text: string,
): { found: boolean; rewrite: (fieldPath: string, source: string) => string } {
  const found = new Map<string, [number, number][]>();
  for (const e of policyExpressions(policy)) {
    const ranges = find(e.program.ast);
    if (ranges.length > 0) found.set(e.fieldPath, ranges);
  }
  return {
    found: found.size > 0,
    rewrite: (fieldPath, source) => {
      const ranges = found.get(fieldPath);
      return ranges ? replaceRanges(source, ranges, text) : source;
    },
  };
}

// ------------------------------------------------- the settings variable, both ways

/**
 * Policy → VAP: each free `params` read of `policy` rewritten to `variables.<variable>`;
 * `found` says whether any expression reads params.
 */
export const paramsToVariable = (policy: CompiledPolicy, variable: string) =>
  expressionRewriter(policy, (ast) => freeIdentifiers(ast, 'params'), `variables.${variable}`);

/** VAP → Policy: each `variables.<variable>` read of `policy` rewritten back to `params`. */
export const variableToParams = (policy: CompiledPolicy, variable: string) =>
  expressionRewriter(policy, (ast) => variableReads(ast, variable), 'params');

/** Macros whose first argument names an iteration variable in scope of the rest. */
const BINDING_MACROS = new Set(['all', 'exists', 'exists_one', 'existsOne', 'map', 'filter']);

/**
 * The `[start, end)` ranges of every free `name` identifier in `root` (not one that a
 * comprehension or `cel.bind` declares).
 */
function freeIdentifiers(root: ASTNode, name: string): [number, number][] {
  const found: [number, number][] = [];
  const visit = (item: unknown, shadowed: boolean): void => {
    if (Array.isArray(item)) {
      for (const child of item) visit(child, shadowed);
      return;
    }
    if (!isNode(item)) return;
    if (item.op === 'id') {
      if (item.args === name && !shadowed) found.push([item.start, item.end]);
      return;
    }
    if (item.op === 'rcall') {
      const [method, receiver, args] = item.args as [string, ASTNode, ASTNode[]];
      const declared = (n: ASTNode | undefined) => isNode(n) && n.op === 'id' && n.args === name;
      if (BINDING_MACROS.has(method) && args.length >= 2) {
        visit(receiver, shadowed);
        const inner = shadowed || args.slice(0, -1).some(declared);
        for (const arg of args.slice(args.length - 1)) visit(arg, inner);
        return;
      }
      if (
        method === 'bind' &&
        isNode(receiver) &&
        receiver.op === 'id' &&
        receiver.args === 'cel'
      ) {
        const [variable, init, body] = args;
        visit(init, shadowed);
        visit(body, shadowed || declared(variable));
        return;
      }
    }
    visit(item.args, shadowed);
  };
  visit(root, false);
  return found;
}

/** The ranges of `variables.<name>` (and `variables['<name>']`) in `root`. */
function variableReads(root: ASTNode, name: string): [number, number][] {
  const found: [number, number][] = [];
  const visit = (item: unknown): void => {
    if (Array.isArray(item)) return item.forEach(visit);
    if (!isNode(item)) return;
    if (item.op === '.' || item.op === '[]') {
      const [target, key] = item.args as [ASTNode, unknown];
      const keyName = isNode(key) ? (key.op === 'value' ? key.args : undefined) : key;
      if (isNode(target) && target.op === 'id' && target.args === 'variables' && keyName === name) {
        found.push([item.start, item.end]);
        return;
      }
    }
    visit(item.args);
  };
  visit(root);
  return found;
}
