/**
 * Whether a request reaches a Policy at all, as the apiserver decides for the webhook rollcall
 * registers (admissionregistration.k8s.io/v1 semantics, `predicates/rules` and
 * `predicates/{namespace,object}` of k8s.io/apiserver): the rules (operations, apiGroups,
 * apiVersions, resources with `*` and subresources, scope), the namespaces every rollcall webhook
 * excludes, the namespaceSelector and the objectSelector. matchConditions are the engine's.
 *
 * Not modelled: `matchPolicy: Equivalent` (a rule for apps/v1 also catching a request made
 * through another version of the same resource); requests are made in the object's version.
 */
import type { LabelSelector, PolicySpec, Rule } from '../../api/v1alpha1.ts';
import { excludedNamespaces, ruleIntercepts } from '../../control-plane/functions/webhook-core.ts';
import { selects } from '../../lib/kube/label-selector.ts';

/** rollcall's namespace when nobody configured another (`--namespace` of the roles). */
export const DEFAULT_ROLLCALL_NAMESPACE = 'rollcall-system';

/** Where rollcall runs, which decides the namespaces its webhooks exclude. */
export interface RollcallNamespaces {
  /** rollcall's namespace (excluded by every webhook with the protected ones). */
  rollcallNamespace?: string;
  protectedNamespaces?: readonly string[];
}

/** The namespaces every rollcall webhook excludes. */
export function webhookExclusions(options: RollcallNamespaces): string[] {
  return excludedNamespaces({
    namespace: options.rollcallNamespace ?? DEFAULT_ROLLCALL_NAMESPACE,
    ...(options.protectedNamespaces ? { protectedNamespaces: options.protectedNamespaces } : {}),
  });
}

/** What the matchers read of a request. */
export interface RequestAttributes {
  operation: string;
  group: string;
  version: string;
  resource: string;
  subresource: string;
  /** The request's namespace; for a Namespace object its own name; '' when cluster-scoped. */
  namespace: string;
  object: unknown;
  oldObject: unknown;
}

export type MatchResult =
  | {
      matched: true;
      /** The rule that matched, by index. */
      rule: number;
      /** What could not be checked offline (a namespace whose labels are unknown). */
      notes: string[];
    }
  | { matched: false; reason: string };

const exactOrWildcard = (items: readonly string[], requested: string) =>
  items.some((item) => item === '*' || item === requested);

const isNamespaceRequest = (a: RequestAttributes) =>
  a.group === '' && a.version === 'v1' && a.resource === 'namespaces';

/** The `resource/subresource` a request is for. */
const requested = (a: RequestAttributes) =>
  a.subresource === '' ? a.resource : `${a.resource}/${a.subresource}`;

/** One rule of admissionregistration v1, as `rules.Matcher.Matches` reads it. */
export function ruleMatches(rule: Rule, a: RequestAttributes): boolean {
  const scope = rule.scope ?? '*';
  const scoped =
    scope === '*' ||
    (scope === 'Namespaced' && !isNamespaceRequest(a) && a.namespace !== '') ||
    (scope === 'Cluster' && (isNamespaceRequest(a) || a.namespace === ''));
  return (
    scoped &&
    rule.operations.some((op) => op === '*' || op === a.operation) &&
    exactOrWildcard(rule.apiVersions, a.version) &&
    // Groups and resource patterns (`*`, `*/*`, `pods/*`, `*/status`) as the webhook guard reads them.
    ruleIntercepts(rule, { group: a.group, resource: requested(a) })
  );
}

const isEmptySelector = (s: LabelSelector | undefined) =>
  !s ||
  ((s.matchLabels === undefined || Object.keys(s.matchLabels).length === 0) &&
    (s.matchExpressions === undefined || s.matchExpressions.length === 0));

/** An object's labels, or undefined when it is not an object (a DELETE's `object`). */
export function labelsOf(object: unknown): Record<string, string> | undefined {
  if (typeof object !== 'object' || object === null) return undefined;
  const labels = (object as { metadata?: { labels?: unknown } }).metadata?.labels;
  if (typeof labels !== 'object' || labels === null) return {};
  return Object.fromEntries(
    Object.entries(labels).filter((e): e is [string, string] => typeof e[1] === 'string'),
  );
}

const describeRule = (rule: Rule) =>
  `${rule.operations.join(',')} ${rule.apiGroups.map((g) => g || 'core').join(',')}/${rule.apiVersions.join(',')} ${rule.resources.join(',')}${rule.scope && rule.scope !== '*' ? ` (${rule.scope})` : ''}`;

export interface MatchOptions extends RollcallNamespaces {
  /**
   * The labels of the request's Namespace; undefined when unknown offline (the namespaceSelector
   * is then not checked, and a note says so).
   */
  namespaceLabels?: Readonly<Record<string, string>> | undefined;
}

/**
 * Whether the webhook rollcall registers for `spec` would send this request to the policy
 * server, and if not, why. The order is the apiserver's: rules, then namespace, then object.
 */
export function admissionMatch(
  spec: Pick<PolicySpec, 'rules' | 'namespaceSelector' | 'objectSelector'>,
  a: RequestAttributes,
  options: MatchOptions = {},
): MatchResult {
  const rule = spec.rules.findIndex((r) => ruleMatches(r, a));
  if (rule < 0)
    return {
      matched: false,
      reason: `no rule matches ${a.operation} ${requested(a)} (${a.group || 'core'}/${a.version}${a.namespace ? ', namespaced' : ', cluster-scoped'}): ${spec.rules.map(describeRule).join('; ')}`,
    };

  const notes: string[] = [];
  // Cluster-scoped objects other than Namespaces are never exempted by namespaces.
  if (a.namespace !== '' || isNamespaceRequest(a)) {
    const excluded = webhookExclusions(options);
    if (excluded.includes(a.namespace))
      return {
        matched: false,
        reason: `rollcall's webhooks exclude namespace ${a.namespace} (${excluded.join(', ')})`,
      };
    if (!isEmptySelector(spec.namespaceSelector)) {
      // A Namespace being created or updated is matched on its own labels.
      const own =
        isNamespaceRequest(a) &&
        a.subresource === '' &&
        (a.operation === 'CREATE' || a.operation === 'UPDATE')
          ? labelsOf(a.object)
          : undefined;
      const labels = own ?? options.namespaceLabels;
      if (labels === undefined)
        notes.push(
          `namespace ${a.namespace}: labels unknown (no Namespace object given), namespaceSelector not checked`,
        );
      else if (!selects(spec.namespaceSelector, labels))
        return {
          matched: false,
          reason: `namespace ${a.namespace} does not match the namespaceSelector (labels ${JSON.stringify(labels)})`,
        };
    }
  }

  if (!isEmptySelector(spec.objectSelector)) {
    // Either the new or the old object may match (an absent one does not).
    const candidates = [labelsOf(a.object), labelsOf(a.oldObject)].filter(
      (l): l is Record<string, string> => l !== undefined,
    );
    if (!candidates.some((labels) => selects(spec.objectSelector, labels)))
      return { matched: false, reason: 'the object does not match the objectSelector' };
  }
  return { matched: true, rule, notes };
}
