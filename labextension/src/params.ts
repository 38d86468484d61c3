/**
 * What the submit dialog checks itself. Parameters are not parsed here: the dialog sends the
 * `name = value` lines as typed and the server reads them with the grammar of `-p NAME VALUE`
 * (`jiyu submit`, `%submit`), so a value means the same whichever way a job is submitted, and
 * a line the server cannot read comes back as an error that names it.
 */

import type { Submission } from './api.generated';

export class ParamError extends Error {}

/** What the submit dialog's fields hold. */
export interface ISubmitValues {
  nproc: string;
  name: string;
  params: string;
}

/** The `POST /jiyu/api/runs` body for a notebook and the dialog's values. */
export function toSubmission(path: string, values: ISubmitValues): Submission {
  const submission: Submission = {
    notebook: path,
    nproc: parseNproc(values.nproc),
    param_lines: paramLines(values.params)
  };
  if (values.name.trim()) {
    submission.name = values.name.trim();
  }
  return submission;
}

/** The parameter text as the lines the server reads, numbered as the user sees them. */
export function paramLines(text: string): string[] {
  return text.trim() ? text.split(/\r?\n/) : [];
}

/** The whole number of processes per node the dialog asked for, or an error message. */
export function parseNproc(text: string): number {
  const value = Number(text.trim());
  if (!Number.isInteger(value) || value < 1) {
    throw new ParamError(`Processes must be a whole number of at least 1, got "${text}"`);
  }
  return value;
}

/** The names the notebook's `parameters` cell assigns (top-level `name = ...` lines). */
export function parameterNames(source: string): string[] {
  const names = source
    .split('\n')
    .map(line => /^([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)/.exec(line)?.[1])
    .filter((name): name is string => !!name);
  return [...new Set(names)];
}
