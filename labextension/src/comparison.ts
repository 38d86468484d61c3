/**
 * The comparison table, pure: what a tracker records of each run (parameters, model,
 * optimizer, data, fit options) as rows grouped in that order, the rows that differ between
 * the runs shown first, then the final/best metrics; the rows that are the same in every run,
 * and the internal options (keep_ckpts, log_interval_s...) whatever their values, folded away.
 * The same columns and layout as `%runs compare`, `jiyu compare` and `jiyu_magics.runs()`
 * (core/run_comparison.py, views/compare_view.py).
 */

import * as fmt from './format';
import type { IAncestor } from './lineage';
import { best, final, IRunHistory } from './runevents';
import type { Run } from './api.generated';

export interface ICompared {
  run: Run;
  history: IRunHistory;
  /** The runs it resumed from, parent first: their steps join its curve, dimmed. */
  ancestors?: IAncestor[];
}

/** The groups of what a tracker records, in the order Compare shows them, by column prefix. */
export const GROUPS = [
  ['parameters', 'param.'],
  ['model', 'model.'],
  ['optimizer', 'optimizer.'],
  ['data', 'data.'],
  ['fit options', 'option.']
] as const;

export type RowGroup = (typeof GROUPS)[number][0] | 'metrics';

/** Options every run has and nobody compares: folded with the rows that are the same. */
export const INTERNAL_OPTIONS: ReadonlySet<string> = new Set([
  'keep_ckpts',
  'log_interval_s',
  'log_every',
  'ckpt_every',
  'ckpt_dir',
  'save_ckpts',
  'stall_timeout',
  'fast_data',
  'name',
  'resume',
  'val_every',
  'scheduler_interval'
]);

/** `data.` columns and the `start` event field each comes from. */
const DATA: ReadonlyArray<[string, string]> = [
  ['batch_size', 'batch_size'],
  ['steps_per_epoch', 'steps_per_epoch'],
  ['accum', 'accum'],
  ['nproc', 'nproc'],
  ['kind', 'data'],
  ['total_steps', 'total_steps']
];

export interface ICompareRow {
  /** The column as `jiyu compare` and `jiyu_magics.runs()` name it: `param.lr`, `optimizer.lr`. */
  column: string;
  /** What the row is called under its group heading: `lr`. */
  name: string;
  group: RowGroup;
  values: string[];
  /** Not the same in every run (never set on metrics: they differ as a matter of course). */
  differs: boolean;
  /** An internal option: folded even where it differs. */
  internal: boolean;
}

export interface ICompareLayout {
  /** What differs between the runs (everything but internal options for one run), by group. */
  shown: ICompareRow[];
  /** Status, last step, final/best losses, wall time. */
  metrics: ICompareRow[];
  /** The same in every run, or internal: the collapsed "N equal rows" section, by group. */
  folded: ICompareRow[];
}

/**
 * What a tracker records of a run's last `fit` call, from its `start` event and the run's
 * `-p` values, as grouped columns (core/run_comparison.py `tracked`): its parameters (the
 * notebook's parameters cell over `-p`), model class and size, optimizer hyperparameters per
 * parameter group (`optimizer.lr`, `optimizer.lr[1]`), data and every fit option.
 */
export function tracked(run: Run, history: IRunHistory): Map<string, unknown> {
  const s = history.start;
  const columns = new Map<string, unknown>();
  const config = { ...(run.params ?? {}), ...((s.config as Record<string, unknown>) ?? {}) };
  for (const key of Object.keys(config).sort()) {
    columns.set(`param.${key}`, config[key]);
  }
  columns.set('model.class', s.model);
  columns.set('model.parameters', s.params);
  columns.set('optimizer.class', s.optimizer);
  const groups = (s.optimizer_groups as Array<Record<string, unknown>> | undefined) ?? [];
  groups.forEach((group, index) => {
    for (const [key, value] of Object.entries(group)) {
      columns.set(`optimizer.${key}${index ? `[${index}]` : ''}`, value);
    }
  });
  columns.set('optimizer.scheduler', s.scheduler);
  for (const [column, key] of DATA) {
    columns.set(`data.${column}`, s[key]);
  }
  const options = (s.options as Record<string, unknown> | undefined) ?? {};
  for (const key of Object.keys(options).sort()) {
    columns.set(`option.${key}`, options[key]);
  }
  return columns;
}

function groupOf(column: string): RowGroup {
  return GROUPS.find(([, prefix]) => column.startsWith(prefix))?.[0] ?? 'metrics';
}

function groupIndex(group: RowGroup): number {
  const index = GROUPS.findIndex(([name]) => name === group);
  return index < 0 ? GROUPS.length : index;
}

/** The table's rows: each group's differing rows shown, the rest folded, then the metrics. */
export function compareRows(runs: ReadonlyArray<ICompared>): ICompareLayout {
  const columns = runs.map(r => tracked(r.run, r.history));
  const known = (value: unknown) => value !== undefined && value !== null;
  const names = [...new Set(columns.flatMap(c => [...c.keys()]))].filter(column =>
    columns.some(c => known(c.get(column)))
  );
  const rows: ICompareRow[] = names.map(column => {
    const values = columns.map(c => shown(c.get(column)));
    const name = column.slice(column.indexOf('.') + 1);
    return {
      column,
      name,
      group: groupOf(column),
      values,
      differs: new Set(values).size > 1,
      internal: column.startsWith('option.') && INTERNAL_OPTIONS.has(name)
    };
  });
  // by group, and within a group what differs first (Array.sort is stable: the rest keep order)
  rows.sort(
    (a, b) => groupIndex(a.group) - groupIndex(b.group) || Number(b.differs) - Number(a.differs)
  );
  const single = runs.length < 2;
  const isShown = (r: ICompareRow) => !r.internal && (single || r.differs);
  return {
    shown: rows.filter(isShown),
    metrics: metricRows(runs),
    folded: rows.filter(r => !isShown(r))
  };
}

function metricRows(runs: ReadonlyArray<ICompared>): ICompareRow[] {
  const metric = (name: string, values: string[]): ICompareRow => ({
    column: name,
    name,
    group: 'metrics',
    values,
    differs: false,
    internal: false
  });
  const validated = runs.some(r => r.history.valLoss.step.length > 0);
  const classified = runs.some(r => r.history.valAccuracy.step.length > 0);
  return [
    metric(
      'status',
      runs.map(r => r.run.status)
    ),
    metric(
      'last step',
      runs.map(r => shown(r.history.last.step))
    ),
    metric(
      'final loss',
      runs.map(r => fmt.loss(final(r.history.loss.step)))
    ),
    metric(
      'best loss',
      runs.map(r => fmt.loss(best(r.history.loss.step)))
    ),
    ...(validated
      ? [
          metric(
            'final val loss',
            runs.map(r => fmt.loss(final(r.history.valLoss.step)))
          )
        ]
      : []),
    ...(classified
      ? [
          metric(
            'best val accuracy',
            runs.map(r => percentage(best(r.history.valAccuracy.step, false)))
          )
        ]
      : []),
    metric(
      'wall time',
      runs.map(r => fmt.duration(r.run.duration))
    )
  ];
}

function shown(value: unknown): string {
  if (value === undefined || value === null) {
    return fmt.NA;
  }
  if (typeof value === 'number' && !Number.isInteger(value)) {
    return String(Number(value.toPrecision(4)));
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function percentage(value: number | null): string {
  return value === null ? fmt.NA : `${(100 * value).toFixed(1)}%`;
}

/**
 * What tells runs of one name apart, as Compare finds it: for each run, "name=value" of the
 * columns whose values are not the same in every run of that name (empty when nothing
 * differs). The columns are the run's parameters and what its summary keeps of Compare's
 * (the parameters cell, model, optimizer hyperparameters, data): an `lr` set in the cell's
 * body, not in a parameters cell, differs as `lr` of the optimizer. A column that differs
 * exactly as an earlier one does (a parameter that sets the optimizer's lr) is said once;
 * a name is shown without its group unless two shown columns share it.
 */
export function differingParams(runs: ReadonlyArray<Run>): Map<string, string> {
  const byName = new Map<string, Run[]>();
  for (const run of runs) {
    byName.set(run.name, [...(byName.get(run.name) ?? []), run]);
  }
  const result = new Map<string, string>();
  for (const group of byName.values()) {
    const columns = group.map(listedColumns);
    const names = [...new Set(columns.flatMap(c => [...c.keys()]))].sort(
      (a, b) => groupIndex(groupOf(a)) - groupIndex(groupOf(b))
    );
    // a run that never started (or ended before summaries kept these) has no say in them
    const knows = (index: number, column: string) =>
      column.startsWith('param.') || group[index].summary.tracked !== null;
    const valuesOf = (column: string) =>
      columns.flatMap((c, index) => (knows(index, column) ? [shown(c.get(column))] : []));
    const seen: string[] = [];
    const differing = names.filter(column => {
      const values = valuesOf(column);
      const key = values.join('\u0000');
      if (new Set(values).size < 2 || seen.includes(key)) {
        return false;
      }
      seen.push(key);
      return true;
    });
    const short = (column: string) => column.slice(column.indexOf('.') + 1);
    const label = (column: string) =>
      differing.filter(c => short(c) === short(column)).length > 1 ? column : short(column);
    group.forEach((run, index) => {
      result.set(
        run.id,
        differing
          .filter(column => knows(index, column))
          .map(column => `${label(column)}=${shown(columns[index].get(column))}`)
          .join(' ')
      );
    });
  }
  return result;
}

/** A run's columns as a list knows them: its parameters, then its summary's of Compare's. */
function listedColumns(run: Run): Map<string, unknown> {
  const columns = new Map<string, unknown>();
  for (const [key, value] of Object.entries(run.params ?? {})) {
    columns.set(`param.${key}`, value);
  }
  for (const [column, value] of Object.entries(run.summary.tracked ?? {})) {
    columns.set(column, value); // the call's own parameters over the run's -p values, as Compare
  }
  return columns;
}
