/**
 * What the comparison shows, from the runs' records and folded histories: the overlaid loss
 * curves with their controls and the table. No JupyterLab imports: vitest renders it.
 */

import * as React from 'react';

import { ISeries } from './chart';
import { compareRows, ICompared } from './comparison';
import { ChartControls, DEFAULT_OPTIONS, IChartOptions, LossChart, PALETTE } from './lossplot';

export function Comparison(props: { runs: ICompared[]; error?: string | null }): JSX.Element {
  const [options, setOptions] = React.useState<IChartOptions>(DEFAULT_OPTIONS);
  if (props.runs.length === 0) {
    return <p className="jp-JiyuRunPage-placeholder">{props.error ?? 'Reading the runs…'}</p>;
  }
  // each run's train loss, and its validation loss dashed in the same colour where it validated
  const series: ISeries[] = props.runs.flatMap((r, i) => {
    const color = PALETTE[i % PALETTE.length];
    const label = `${r.run.name} (${r.run.id})`;
    const pick = (c: { step: ISeries['points']; time: ISeries['points'] }) =>
      options.xAxis === 'step' ? c.step : c.time;
    const train: ISeries = { label, points: pick(r.history.loss), color };
    const val = pick(r.history.valLoss);
    return val.length > 0
      ? [train, { label: `${label} val`, points: val, color, dashed: true }]
      : [train];
  });
  return (
    <div className="jp-JiyuCompare-body">
      {props.error && (
        <div className="jp-JiyuPanel-error" role="alert">
          {props.error}
        </div>
      )}
      <ChartControls options={options} onChange={setOptions} />
      <LossChart
        series={series}
        options={options}
        label="Training and validation loss of the compared runs"
      />
      <CompareTable runs={props.runs} />
    </div>
  );
}

export function CompareTable(props: { runs: ICompared[] }): JSX.Element {
  const rows = compareRows(props.runs);
  return (
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
        {rows.map(row => (
          <tr
            key={`${row.kind}-${row.name}`}
            className={`jp-mod-${row.kind}${row.differs ? ' jp-mod-differs' : ''}`}
            data-row={row.name}
          >
            <th title={row.differs ? 'differs between the runs' : undefined}>{row.name}</th>
            {row.values.map((v, i) => (
              <td key={i}>{v}</td>
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}
