// metav1.LabelSelector, evaluated as the apiserver does for webhooks' namespaceSelector and
// objectSelector: shared by the audit (which objects a Policy judges) and `rollcall eval`.
import type { LabelSelector } from '../../api/v1alpha1.ts';

/** Whether `labels` satisfy `selector`; an absent or empty selector selects everything. */
export function selects(
  selector: LabelSelector | undefined,
  labels: Readonly<Record<string, string>> = {},
): boolean {
  if (!selector) return true;
  for (const [key, value] of Object.entries(selector.matchLabels ?? {}))
    if (labels[key] !== value) return false;
  for (const { key, operator, values = [] } of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, key);
    const ok =
      operator === 'Exists'
        ? has
        : operator === 'DoesNotExist'
          ? !has
          : operator === 'In'
            ? has && values.includes(labels[key]!)
            : !has || !values.includes(labels[key]!);
    if (!ok) return false;
  }
  return true;
}
