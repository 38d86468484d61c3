/**
 * What the comparison shows, from the runs' records and folded histories: the overlaid loss
 * curves (a resumed run joined to its parents' steps, dimmed) with their controls and the
 * table. No JupyterLab imports: vitest renders it.
 */

import * as React from 'react';

import { ISeries } from './chart';
import { compareRows, ICompared, ICompareRow } from './comparison';
import { ancestorSeries } from './lineage';
import { ChartControls, DEFAULT_OPTIONS, IChartOptions, LossChart, PALETTE } from './lossplot';

export function Comparison(props: { runs: ICompared[]; error?: string | null }): JSX.Element {
  const [options, setOptions] = React.useState<IChartOptions>(DEFAULT_OPTIONS);
  if (props.runs.length === 0) {
    return <p className="jp-JiyuRunPage-placeholder">{props.error ?? 'Reading the runs…'}</p>;
  }
  return (
    <div className="jp-JiyuCompare-body">
      {props.error && (
        <div className="jp-JiyuPanel-error" role="alert">
          {props.error}
        </div>
      )}
      <ChartControls options={options} onChange={setOptions} />
      <LossChart
        series={compareSeries(props.runs, options)}
        options={options}
        label="Training and validation loss of the compared runs"
      />
      <CompareTable runs={props.runs} />
    </div>
  );
}

/**
 * Per run, in its colour: the steps of the runs it resumed from (dimmed, by step only, up to
 * where each was resumed), its training loss, and its validation loss dashed where it validated.
 */
export function compareSeries(runs: ReadonlyArray<ICompared>, options: IChartOptions): ISeries[] {
  const byStep = options.xAxis === 'step';
  return runs.flatMap((r, i) => {
    const color = PALETTE[i % PALETTE.length];
    const label = `${r.run.name} (${r.run.id})`;
    const pick = (c: { step: ISeries['points']; time: ISeries['points'] }) =>
      byStep ? c.step : c.time;
    const before = byStep
      ? ancestorSeries(r.ancestors ?? [], color, a => `${label} ← ${a.run.id}`)
      : [];
    const train: ISeries = { label, points: pick(r.history.loss), color };
    const val = pick(r.history.valLoss);
    return [
      ...before,
      train,
      ...(val.length > 0 ? [{ label: `${label} val`, points: val, color, dashed: true }] : [])
    ];
  });
}

/**
 * The runs' columns: per group (parameters, model, optimizer, data, fit options) the rows that
 * differ, then the metrics; below, collapsed, "N equal rows": what is the same in every run
 * and the internal options, by group too.
 */
export function CompareTable(props: { runs: ICompared[] }): JSX.Element {
  const layout = compareRows(props.runs);
  const columns = props.runs.length + 1;
  return (
    <>
      <table className="jp-JiyuTable jp-JiyuCompare-table" aria-label="Compared runs">
        <thead>
          <tr>
            <th />
            {props.runs.map((r, i) => (
              <th key={r.run.id} style={{ borderBottomColor: PALETTE[i % PALETTE.length] }}>
                {r.run.name}
                <div className="jp-JiyuCompare-id">{r.run.id}</div>
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {layout.shown.length === 0 && (
            <tr className="jp-JiyuCompare-group">
              <th colSpan={columns}>Nothing recorded differs between these runs</th>
            </tr>
          )}
          <Rows rows={[...layout.shown, ...layout.metrics]} columns={columns} />
        </tbody>
      </table>
      {layout.folded.length > 0 && (
        <details className="jp-JiyuCompare-same">
          <summary title="The same in every run, and internal options (keep_ckpts, log_interval_s...)">
            {layout.folded.length} equal {layout.folded.length === 1 ? 'row' : 'rows'}
          </summary>
          <table className="jp-JiyuTable jp-JiyuCompare-table" aria-label="Equal rows">
            <tbody>
              <Rows rows={layout.folded} columns={columns} />
            </tbody>
          </table>
        </details>
      )}
    </>
  );
}

/** Rows with a heading row where the group changes. */
function Rows(props: { rows: ICompareRow[]; columns: number }): JSX.Element {
  const out: JSX.Element[] = [];
  let group: string | null = null;
  for (const row of props.rows) {
    if (row.group !== group) {
      group = row.group;
      out.push(
        <tr key={`group-${group}`} className="jp-JiyuCompare-group" data-group={group}>
          <th colSpan={props.columns}>{group}</th>
        </tr>
      );
    }
    const kind = row.group === 'metrics' ? 'metric' : 'param';
    out.push(
      <tr
        key={row.column}
        className={`jp-mod-${kind}${row.differs ? ' jp-mod-differs' : ''}`}
        data-row={row.column}
      >
        <th title={row.differs ? `${row.column}: differs between the runs` : row.column}>
          {row.name}
        </th>
        {row.values.map((v, i) => (
          <td key={i}>{v}</td>
        ))}
      </tr>
    );
  }
  return <>{out}</>;
}
