/**
 * `rollcall convert --to vap FILE` and `rollcall convert --from vap FILE`: the conversion of
 * convert-to-vap.ts and convert-from-vap.ts over the objects of a file, YAML on standard
 * output and what did not carry over on standard error.
 *
 * Exit codes: 0 converted, 1 converted but something did not carry over (named), 2 unusable
 * input or a policy that cannot be converted at all (a `source` or `module` policy, a VAP whose
 * param resource is missing).
 */
import { stringify } from 'yaml';
import { readCommandLine, stringOptions } from '../command-line.ts';
import type { StatusIo } from '../status.ts';
import type { ConversionNote } from './convert.ts';
import { vapToPolicies } from './convert-from-vap.ts';
import { policyToVap } from './convert-to-vap.ts';
import { InputError, objectsIn, readObjects } from './documents.ts';
import { isPolicyObject, policyName } from './policies.ts';

export const CONVERT_USAGE = `Usage: rollcall convert --to vap FILE
       rollcall convert --from vap FILE [--policy-server NAME]

--to vap: each Policy with inline code in FILE becomes a ValidatingAdmissionPolicy and a
ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1). Settings are inlined as
the first variable (params → variables.params), so they keep their types; the namespaces every
rollcall webhook excludes are excluded by the VAP too; the Policy's validationActions become
the binding's (the deprecated mode: protect binds with [Deny], monitor with [Warn]).

--from vap: each ValidatingAdmissionPolicy in FILE becomes a Policy per binding in FILE (its
validationActions become the Policy's; its param resource, when FILE holds it, the settings).

YAML goes to standard output; what does not carry over is named on standard error. FILE "-"
reads standard input.

Options:
  --policy-server NAME   the PolicyServer of converted Policies (default default)

Exit codes: 0 converted, 1 converted but something did not carry over, 2 unusable input or a
policy that cannot be converted (spec.source, spec.module, a missing param resource).
`;

export async function runConvert(argv: readonly string[], io: StatusIo): Promise<number> {
  const line = readCommandLine(
    argv,
    io,
    {
      name: 'convert',
      usage: CONVERT_USAGE,
      options: stringOptions('to', 'from', 'policy-server'),
    },
    ({ values, positionals }) => {
      if ((values.to === undefined) === (values.from === undefined))
        throw new InputError('give either --to vap or --from vap');
      const format = values.to ?? values.from;
      if (format !== 'vap') throw new InputError(`the only format is vap, not "${format}"`);
      const direction: 'to' | 'from' = values.to !== undefined ? 'to' : 'from';
      if (positionals.length !== 1) throw new InputError('give one FILE');
      const policyServer = values['policy-server'];
      if (policyServer !== undefined && direction === 'to')
        throw new InputError('--policy-server goes with --from vap');
      return { direction, file: positionals[0] as string, policyServer };
    },
  );
  if ('exit' in line) return line.exit;
  const { direction, file, policyServer } = line.args;

  let objects: Record<string, unknown>[];
  try {
    const sources =
      file === '-'
        ? objectsIn(await io.readStdin(), 'stdin')
        : await readObjects((p) => io.readFile(p), file);
    objects = sources.map((s) => s.value);
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    io.stderr(`rollcall convert: ${error.message}\n`);
    return 2;
  }

  const out: Record<string, unknown>[] = [];
  const notes: ConversionNote[] = [];
  const errors: string[] = [];
  if (direction === 'to') {
    const policies = objects.filter(isPolicyObject);
    if (policies.length === 0) errors.push(`${file}: no rollcall.dev/v1alpha1 Policy in it`);
    for (const policy of policies) {
      const result = policyToVap(policy);
      const name = policyName(policy) ?? '(unnamed)';
      if (!result.ok) errors.push(...result.errors.map((e) => `Policy ${name}: ${e}`));
      else {
        out.push(...result.objects);
        notes.push(...result.notes.map((n) => ({ ...n, field: `Policy/${name} ${n.field}` })));
      }
    }
  } else {
    const result = vapToPolicies(objects, policyServer ? { policyServer } : {});
    if (!result.ok) errors.push(...result.errors.map((e) => `${file}: ${e}`));
    else {
      out.push(...result.objects);
      notes.push(...result.notes);
    }
  }

  if (out.length > 0) io.stdout(out.map((o) => stringify(o, { lineWidth: 0 })).join('---\n'));
  for (const n of notes)
    io.stderr(`${n.lost ? 'not converted' : 'note'}: ${n.field}: ${n.message}\n`);
  for (const e of errors) io.stderr(`rollcall convert: ${e}\n`);
  if (errors.length > 0) return 2;
  return notes.some((n) => n.lost) ? 1 : 0;
}
