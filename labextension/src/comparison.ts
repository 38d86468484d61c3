/**
 * The comparison table, pure: one row per parameter (the union of the runs' `-p` values and
 * their training options) and per final/best metric, with the rows whose values differ
 * between runs marked. The same rows as `%runs compare` and `jiyu_magics.runs()`.
 */

import * as fmt from './format';
import { best, final, IRunHistory } from './runevents';
import { IRun } from './types';

export interface ICompared {
  run: IRun;
  history: IRunHistory;
}

export interface ICompareRow {
  name: string;
  kind: 'param' | 'option' | 'metric';
  values: string[];
  differs: boolean;
}

const OPTIONS = [
  'epochs',
  'total_steps',
  'batch_size',
  'accum',
  'amp',
  'device',
  'strategy',
  'nproc'
];

export function compareRows(runs: ReadonlyArray<ICompared>): ICompareRow[] {
  const params = [...new Set(runs.flatMap(r => Object.keys(r.run.params ?? {})))].sort();
  const rows: ICompareRow[] = [
    ...params.map(p =>
      row(
        p,
        'param',
        runs.map(r => shown(r.run.params?.[p]))
      )
    ),
    ...OPTIONS.map(o =>
      row(
        o,
        'option',
        runs.map(r => shown(r.history.start[o]))
      )
    ).filter(r => r.values.some(v => v !== fmt.NA)),
    row(
      'status',
      'metric',
      runs.map(r => r.run.status)
    ),
    row(
      'last step',
      'metric',
      runs.map(r => shown(r.history.last.step))
    ),
    row(
      'final loss',
      'metric',
      runs.map(r => fmt.loss(final(r.history.loss.step)))
    ),
    row(
      'best loss',
      'metric',
      runs.map(r => fmt.loss(best(r.history.loss.step)))
    ),
    row(
      'final val loss',
      'metric',
      runs.map(r => fmt.loss(final(r.history.valLoss.step)))
    ),
    row(
      'best val accuracy',
      'metric',
      runs.map(r => accuracy(best(r.history.valAccuracy.step, false)))
    ),
    row(
      'wall time',
      'metric',
      runs.map(r => fmt.duration(r.run.duration))
    )
  ];
  return rows;
}

function row(name: string, kind: ICompareRow['kind'], values: string[]): ICompareRow {
  // only parameters and options are "differing parameters"; metrics differ as a matter of course
  const differs = kind !== 'metric' && new Set(values).size > 1;
  return { name, kind, values, differs };
}

function shown(value: unknown): string {
  return value === undefined || value === null
    ? fmt.NA
    : typeof value === 'string'
      ? value
      : JSON.stringify(value);
}

function accuracy(value: number | null): string {
  return value === null ? fmt.NA : `${(100 * value).toFixed(1)}%`;
}

/**
 * What tells runs of one name apart: for each run, "name=value" of the parameters whose
 * values are not the same in every run of that name (empty when nothing differs).
 */
export function differingParams(runs: ReadonlyArray<IRun>): Map<string, string> {
  const byName = new Map<string, IRun[]>();
  for (const run of runs) {
    byName.set(run.name, [...(byName.get(run.name) ?? []), run]);
  }
  const result = new Map<string, string>();
  for (const group of byName.values()) {
    const keys = [...new Set(group.flatMap(r => Object.keys(r.params ?? {})))].sort();
    const differing = keys.filter(k => new Set(group.map(r => shown(r.params?.[k]))).size > 1);
    for (const run of group) {
      result.set(run.id, differing.map(k => `${k}=${shown(run.params?.[k])}`).join(' '));
    }
  }
  return result;
}
