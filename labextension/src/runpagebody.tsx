/**
 * What the run page shows, rendered from a run record and its folded event history. No
 * JupyterLab imports: vitest renders it with react-dom/server.
 */

import * as React from 'react';

import { ISeries } from './chart';
import { RunDetail } from './components';
import * as fmt from './format';
import { ChartControls, DEFAULT_OPTIONS, IChartOptions, LossChart, PALETTE } from './lossplot';
import { ancestorSeries, IAncestor } from './lineage';
import { best, IRunHistory, parentOf, resumeCommand } from './runevents';
import type { RunFeed } from './runfeed';
import { describeRun, shortPaths } from './view';
import type { RankRecord, Run, RunCheckpoints } from './api.generated';
import { ACTIVE_STATUSES } from './statuses';

export function RunPageBody(props: {
  feed: RunFeed;
  error: string | null;
  onStop: (run: Run) => void;
  /** Opens another run's page (a parent's, from the lineage). */
  onOpen?: (runId: string, name: string) => void;
}): JSX.Element {
  const run = props.feed.run;
  if (run === null) {
    return (
      <p className="jp-JiyuRunPage-placeholder">
        {props.error ? `Cannot read the run: ${props.error}` : 'Reading the run…'}
      </p>
    );
  }
  return (
    <RunDetails
      run={run}
      history={props.feed.history}
      ranks={props.feed.ranks}
      checkpoints={props.feed.checkpoints}
      ancestors={props.feed.ancestors}
      onStop={props.onStop}
      onOpen={props.onOpen}
      error={props.error}
    />
  );
}

export function RunDetails(props: {
  run: Run;
  history: IRunHistory;
  ranks?: RankRecord[];
  /** What the checkpoints API says is on disk; null while not read. */
  checkpoints?: RunCheckpoints | null;
  /** The runs it resumed from, parent first. */
  ancestors?: IAncestor[];
  onStop: (run: Run) => void;
  onOpen?: (runId: string, name: string) => void;
  error?: string | null;
}): JSX.Element {
  const { run, history } = props;
  const ancestors = props.ancestors ?? [];
  const v = describeRun(run);
  const [options, setOptions] = React.useState<IChartOptions>(DEFAULT_OPTIONS);
  return (
    <div className="jp-JiyuRunPage-body" data-run-id={run.id}>
      <header className="jp-JiyuRunPage-head">
        <span className={`jp-JiyuChip jp-mod-${v.status}`}>{v.statusLabel}</span>
        <h1 className="jp-JiyuRunPage-title">{run.name}</h1>
        <span className="jp-JiyuRunPage-id">
          {run.id} · {v.kind}
          {v.where ? ` · ${v.where}` : ''}
        </span>
        {v.canStop && (
          <button
            type="button"
            className="jp-JiyuButton jp-mod-stop"
            aria-label={`Stop ${run.name}`}
            onClick={() => props.onStop(run)}
          >
            Stop
          </button>
        )}
      </header>
      {props.error && (
        <div className="jp-JiyuPanel-error" role="alert">
          {props.error}
        </div>
      )}
      <RunDetail view={v} />
      <Lineage run={run} history={history} ancestors={ancestors} onOpen={props.onOpen} />
      <div className="jp-JiyuRunPage-main">
        <section className="jp-JiyuRunPage-chart" aria-label="Loss chart">
          <ChartControls options={options} onChange={setOptions} />
          <LossChart
            series={lossSeries(history, options, ancestors)}
            options={options}
            label={`Loss of ${run.name}`}
          />
        </section>
        <Metrics run={run} history={history} />
      </div>
      <Facts run={run} history={history} ranks={props.ranks} />
      <Checkpoints run={run} history={history} onDisk={props.checkpoints ?? null} />
      <h2 className="jp-JiyuRunPage-heading">Log</h2>
    </div>
  );
}

/** Its lineage's steps up to where each was resumed (dimmed; by step only), then its own. */
function lossSeries(h: IRunHistory, o: IChartOptions, ancestors: IAncestor[]): ISeries[] {
  const pick = (s: { step: any; time: any }) => (o.xAxis === 'step' ? s.step : s.time);
  const before =
    o.xAxis === 'step'
      ? ancestorSeries(ancestors, PALETTE[0], a => `${a.run.name} (${a.run.id}) before resume`)
      : [];
  return [
    ...before,
    { label: 'train loss', points: pick(h.loss), color: PALETTE[0] },
    { label: 'val loss', points: pick(h.valLoss), color: PALETTE[1], dashed: true }
  ];
}

/**
 * "Resumed from: digits (a1b2) at step 230 → this run": the chain of `--resume`, oldest first,
 * each earlier run a button that opens its page. Before its parents are read (or when one is
 * gone) the parent's id from the start event stands alone.
 */
export function Lineage(props: {
  run: Run;
  history: IRunHistory;
  ancestors: IAncestor[];
  onOpen?: (runId: string, name: string) => void;
}): JSX.Element | null {
  const parent = parentOf(props.history, props.run);
  if (!parent) {
    return null;
  }
  const chain =
    props.ancestors.length > 0
      ? props.ancestors.map(a => ({ id: a.run.id, name: a.run.name, step: a.until }))
      : [{ id: parent.run, name: parent.run, step: parent.step }];
  return (
    <nav className="jp-JiyuRunPage-lineage" aria-label="Lineage">
      <span>Resumed from: </span>
      {[...chain].reverse().map(link => (
        <React.Fragment key={link.id}>
          <button
            type="button"
            className="jp-JiyuLink"
            data-run-id={link.id}
            aria-label={`Open the page of ${link.name} (${link.id})`}
            onClick={() => props.onOpen?.(link.id, link.name)}
          >
            {link.name === link.id ? link.id : `${link.name} (${link.id})`}
          </button>
          <span> at step {link.step ?? fmt.NA} → </span>
        </React.Fragment>
      ))}
      <span className="jp-JiyuRunPage-lineage-self">this run</span>
      {props.ancestors.length > 0 && (
        <span className="jp-JiyuRunPage-lineage-note">
          {' '}
          (their steps drawn dimmed before its own, by step)
        </span>
      )}
    </nav>
  );
}

/** The latest numbers, as the cell's dashboard shows them. */
export function Metrics(props: { run: Run; history: IRunHistory }): JSX.Element {
  const h = props.history;
  const last = h.last;
  const total = (h.start.total_steps as number | null) ?? props.run.summary.total_steps;
  const rows: Array<[string, string]> = [
    [
      'step',
      last.step === undefined || last.step === null
        ? fmt.NA
        : `${last.step}${total ? `/${total}` : ''}`
    ],
    ['epoch', last.epoch === undefined || last.epoch === null ? fmt.NA : String(last.epoch)],
    ['loss', fmt.loss(last.loss)],
    ['best loss', fmt.loss(best(h.loss.step))],
    ['lr', last.lr === undefined || last.lr === null ? fmt.NA : last.lr.toExponential(2)],
    ['throughput', fmt.rate(last.samples_per_s)],
    ['wall time', fmt.duration(props.run.duration)]
  ];
  // no validation, no rows that would only say n/a
  const validation: Array<[string, string]> = [];
  if (h.valLoss.step.length > 0 || (last.val_loss ?? null) !== null) {
    validation.push(['val loss', fmt.loss(last.val_loss)]);
  }
  if (h.valAccuracy.step.length > 0 || (last.val_accuracy ?? null) !== null) {
    const acc = last.val_accuracy ?? null;
    validation.push(['val accuracy', acc === null ? fmt.NA : `${(100 * acc).toFixed(1)}%`]);
  }
  rows.splice(4, 0, ...validation);
  // a finished run has nothing left to wait for: no "eta 0:00"
  if (ACTIVE_STATUSES.includes(props.run.status)) {
    rows.push(['eta', fmt.duration(last.eta)]);
  }
  return (
    <dl className="jp-JiyuRunPage-metrics" aria-label="Metrics">
      {rows.map(([k, v]) => (
        <div key={k} className="jp-JiyuRunPage-metric">
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}

const START_FACTS = [
  'epochs',
  'total_steps',
  'batch_size',
  'accum',
  'amp',
  'device',
  'strategy',
  'backend',
  'nproc',
  'params',
  'data',
  'resumed_from',
  'from_notebook'
];

/** Parameters (-p values), the training options of the last start, where it ran, processes. */
function Facts(props: { run: Run; history: IRunHistory; ranks?: RankRecord[] }): JSX.Element {
  const { run, history } = props;
  const params = Object.entries(run.params ?? {});
  const facts = START_FACTS.filter(
    k => history.start[k] !== undefined && history.start[k] !== null
  );
  const gpus = [...new Set((run.gpus ?? []).map(g => g.index))];
  return (
    <div className="jp-JiyuRunPage-facts">
      <section aria-label="Parameters">
        <h2 className="jp-JiyuRunPage-heading">Parameters</h2>
        {params.length === 0 ? (
          <p className="jp-JiyuRunPage-placeholder">No -p parameters.</p>
        ) : (
          <table className="jp-JiyuTable">
            <tbody>
              {params.map(([k, val]) => (
                <tr key={k}>
                  <th>{k}</th>
                  <td>{JSON.stringify(val)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
      <section aria-label="Options">
        <h2 className="jp-JiyuRunPage-heading">Options</h2>
        <table className="jp-JiyuTable">
          <tbody>
            {facts.map(k => (
              <tr key={k}>
                <th>{k}</th>
                <td>{String(history.start[k])}</td>
              </tr>
            ))}
            <tr>
              <th>notebook</th>
              <td title={run.notebook ?? undefined}>
                {run.notebook ? shortPaths(run.notebook) : fmt.NA}
              </td>
            </tr>
            <tr>
              <th>GPUs</th>
              <td>{gpus.length ? gpus.join(', ') : 'none'}</td>
            </tr>
          </tbody>
        </table>
      </section>
      <section aria-label="Processes">
        <h2 className="jp-JiyuRunPage-heading">Processes</h2>
        <Ranks run={run} history={history} records={props.ranks} />
      </section>
    </div>
  );
}

/**
 * Each rank's state: from the rank's own record where it wrote one (pid, exited with code,
 * killed, its error), else the run's, or the error a rank put in the event log.
 */
export function Ranks(props: {
  run: Run;
  history: IRunHistory;
  records?: RankRecord[];
}): JSX.Element {
  const { run, history } = props;
  const records = new Map((props.records ?? []).map(r => [r.rank, r]));
  const count = Math.max(1, run.nproc * run.nnodes, records.size);
  const failed = new Map(
    history.errors.filter(e => e.rank !== null).map(e => [e.rank as number, e.message])
  );
  const launcher = history.errors.filter(e => e.rank === null);
  return (
    <>
      <ul className="jp-JiyuRunPage-ranks" aria-label="Ranks">
        {Array.from({ length: count }, (_, rank) => {
          const text = rankText(rank, run, records.get(rank), failed.get(rank));
          return (
            <li key={rank} className={text.failed ? 'jp-mod-failed' : `jp-mod-${run.status}`}>
              {text.line}
            </li>
          );
        })}
      </ul>
      {launcher.map((e, i) => (
        <p key={i} className="jp-JiyuRun-detail">
          {e.source ?? 'launcher'}: {e.message}
        </p>
      ))}
    </>
  );
}

function rankText(
  rank: number,
  run: Run,
  record: RankRecord | undefined,
  error: string | undefined
): { line: string; failed: boolean } {
  if (!record) {
    return error
      ? { line: `rank ${rank}: failed: ${error}`, failed: true }
      : { line: `rank ${rank}: ${run.status}`, failed: false };
  }
  const failed = record.state === 'killed' || !!record.exit_code;
  const gpus = record.cuda_visible_devices ? ` · GPU ${record.cuda_visible_devices}` : '';
  const restart = record.restart ? ` · restart ${record.restart}` : '';
  return { line: `rank ${rank}: ${rankEnd(record)} · pid ${record.pid}${gpus}${restart}`, failed };
}

/** How a rank ended (or that it runs): its error, "stopped on request", "killed by SIGKILL"... */
export function rankEnd(record: RankRecord): string {
  if (record.state === 'killed') {
    return record.signal_name ? `killed by ${record.signal_name}` : 'killed';
  }
  if (record.state === 'running') {
    return 'running';
  }
  if (record.stopped) {
    return 'stopped on request';
  }
  return record.error ?? `exited with code ${record.exit_code}`;
}

/**
 * The checkpoints that exist (the server checks what the log recorded: `--keep-ckpts` rotates
 * old ones out), each with the command that resumes from it, and how many are gone: a listed
 * checkpoint's command works.
 */
function Checkpoints(props: {
  run: Run;
  history: IRunHistory;
  onDisk: RunCheckpoints | null;
}): JSX.Element {
  const kept = props.onDisk?.checkpoints ?? null;
  const rotated = props.onDisk?.rotated ?? 0;
  let body: JSX.Element;
  if (props.history.checkpoints.length === 0 && !kept?.length) {
    body = <p className="jp-JiyuRunPage-placeholder">No checkpoint written.</p>;
  } else if (kept === null) {
    body = <p className="jp-JiyuRunPage-placeholder">Reading which checkpoints exist…</p>;
  } else {
    body = (
      <>
        <p className="jp-JiyuRunPage-ckptCount">
          {kept.length} on disk
          {rotated > 0 ? ` · ${rotated} older rotated out (--keep-ckpts) or deleted` : ''}
        </p>
        {kept.length > 0 && (
          <table className="jp-JiyuTable jp-JiyuRunPage-ckpts">
            <thead>
              <tr>
                <th>step</th>
                <th>path</th>
                <th>size</th>
                <th>resume with</th>
              </tr>
            </thead>
            <tbody>
              {kept.map(c => (
                <tr key={c.path}>
                  <td>{c.step ?? fmt.NA}</td>
                  <td>
                    <code>{c.path}</code>
                  </td>
                  <td>{fmt.bytes(c.bytes)}</td>
                  <td>
                    <code>{resumeCommand(props.run.name, c)}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </>
    );
  }
  return (
    <section aria-label="Checkpoints">
      <h2 className="jp-JiyuRunPage-heading">Checkpoints</h2>
      {body}
    </section>
  );
}
