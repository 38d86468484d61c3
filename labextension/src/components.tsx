/**
 * The panel's React views: GPU cards and run rows, rendered from plain records. They import
 * nothing from JupyterLab so unit tests render them with react-dom/server.
 */

import * as React from 'react';

import * as fmt from './format';
import { GpuHolder, IdleKernelWarnings, IKernelActions, ProcessList } from './owners';
import { sparkline } from './sparkline';
import { isStalled, StallChip } from './stall';
import { differingParams } from './comparison';
import { describeRun, IRunView, shortPaths, visibleRuns } from './view';
import type { GpuDevice, GpuKernel, GpuStatus, Run } from './api.generated';

export interface IRunActions {
  onStop(run: Run): void;
  onLogs(run: Run): void;
  onStacks?(run: Run): void;
  /** Opens the run's page; the row shows no Open button without it. */
  onOpen?(run: Run): void;
  /** The runs ticked for comparison, and how a tick changes them. */
  selection?: ISelection;
}

export interface ISelection {
  ids: ReadonlySet<string>;
  toggle(runId: string): void;
  compare(runIds: string[]): void;
}

const noShutdown = (_: GpuKernel) => undefined;

export interface IPanelBodyProps extends IRunActions, Partial<IKernelActions> {
  gpus: GpuStatus | null;
  runs: Run[] | null;
  error: string | null;
  finished: number;
}

export function PanelBody(props: IPanelBodyProps): JSX.Element {
  return (
    <div className="jp-JiyuPanel-body">
      {props.error && (
        <div className="jp-JiyuPanel-error" role="alert">
          Cannot reach the jiyu server extension: {props.error}
        </div>
      )}
      <section className="jp-JiyuPanel-section" aria-labelledby="jp-JiyuPanel-gpus">
        <h2 id="jp-JiyuPanel-gpus" className="jp-JiyuPanel-heading">
          GPUs
        </h2>
        <GpuSection
          snapshot={props.gpus}
          onShutdownKernel={props.onShutdownKernel ?? noShutdown}
          onStopLease={props.onStopLease}
        />
      </section>
      <section className="jp-JiyuPanel-section" aria-labelledby="jp-JiyuPanel-runs">
        <h2 id="jp-JiyuPanel-runs" className="jp-JiyuPanel-heading">
          Runs
        </h2>
        <RunList
          runs={props.runs}
          finished={props.finished}
          onStop={props.onStop}
          onLogs={props.onLogs}
          onStacks={props.onStacks}
          onOpen={props.onOpen}
          selection={props.selection}
        />
      </section>
    </div>
  );
}

export function GpuSection(
  props: { snapshot: GpuStatus | null } & Partial<IKernelActions>
): JSX.Element {
  const snap = props.snapshot;
  if (snap === null) {
    return <p className="jp-JiyuPanel-placeholder">Reading GPUs…</p>;
  }
  if (!snap.available) {
    return <NoGpu snapshot={snap} />;
  }
  const kernels = snap.kernels ?? [];
  return (
    <>
      <IdleKernelWarnings kernels={kernels} />
      {snap.owners_note && <p className="jp-JiyuPanel-placeholder">{snap.owners_note}</p>}
      <ul className="jp-JiyuGpuList" aria-label="GPUs">
        {snap.devices.map(d => (
          <GpuCard
            key={d.index}
            device={d}
            kernels={kernels}
            onShutdownKernel={props.onShutdownKernel ?? noShutdown}
            onStopLease={props.onStopLease}
          />
        ))}
      </ul>
    </>
  );
}

function NoGpu(props: { snapshot: GpuStatus }): JSX.Element {
  const { reason, doctor } = props.snapshot;
  return (
    <div className="jp-JiyuNoGpu" role="status">
      <strong>No NVIDIA GPU visible</strong>
      <p>{reason ?? 'unknown reason'}.</p>
      {doctor && (
        <p className="jp-JiyuNoGpu-doctor">
          <span className="jp-JiyuNoGpu-label">Doctor:</span> {doctor.summary}
          {doctor.fix && <span className="jp-JiyuNoGpu-fix"> Fix: {doctor.fix}</span>}
        </p>
      )}
    </div>
  );
}

export function GpuCard(
  props: { device: GpuDevice; kernels?: GpuKernel[] } & Partial<IKernelActions>
): JSX.Element {
  const d = props.device;
  const title = `GPU ${d.index}`;
  const cuda = d.visible_index === null ? 'hidden' : `cuda:${d.visible_index}`;
  const memFraction = fmt.fraction(d.mem_used, d.mem_total);
  return (
    <li className="jp-JiyuGpu" aria-label={`${title}: ${d.name ?? 'unknown'}`}>
      <div className="jp-JiyuGpu-head">
        <span className="jp-JiyuGpu-index">{title}</span>
        <span className="jp-JiyuGpu-name" title={d.uuid ?? undefined}>
          {d.name ?? fmt.NA}
        </span>
        <span className="jp-JiyuGpu-cuda">{cuda}</span>
      </div>
      <Meter
        label="Util"
        name={`${title} utilisation`}
        fraction={d.gpu_util === null ? null : d.gpu_util / 100}
        text={fmt.percent(d.gpu_util)}
      />
      <Meter
        label="Mem"
        name={`${title} memory`}
        fraction={memFraction}
        text={`${fmt.gib(d.mem_used)} / ${fmt.gib(d.mem_total)} GiB`}
        warn={memFraction !== null && memFraction > 0.9}
      />
      {d.leases !== undefined && <GpuHolder device={d} onStopLease={props.onStopLease} />}
      <ProcessList
        device={d}
        kernels={props.kernels ?? []}
        onShutdownKernel={props.onShutdownKernel ?? noShutdown}
      />
      <div className="jp-JiyuGpu-foot">
        <span title="temperature">{d.temperature === null ? fmt.NA : `${d.temperature}°C`}</span>
        <span title="power draw / limit">{fmt.watts(d.power_draw, d.power_limit)}</span>
        <span title="processes using this GPU">
          {d.processes.length} proc{d.processes.length === 1 ? '' : 's'}
        </span>
      </div>
    </li>
  );
}

interface IMeterProps {
  label: string;
  name: string;
  fraction: number | null;
  text: string;
  warn?: boolean;
}

export function Meter(props: IMeterProps): JSX.Element {
  const pct = props.fraction === null ? null : Math.round(props.fraction * 100);
  const classes = ['jp-JiyuMeter-fill'];
  if (props.warn) {
    classes.push('jp-mod-warn');
  }
  return (
    <div className="jp-JiyuMeter">
      <span className="jp-JiyuMeter-label">{props.label}</span>
      <div
        className="jp-JiyuMeter-track"
        role="progressbar"
        aria-label={props.name}
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={pct ?? undefined}
        aria-valuetext={props.text}
      >
        <div className={classes.join(' ')} style={{ width: `${pct ?? 0}%` }} />
      </div>
      <span className="jp-JiyuMeter-value">{props.text}</span>
    </div>
  );
}

interface IRunListProps extends IRunActions {
  runs: Run[] | null;
  finished: number;
}

export function RunList(props: IRunListProps): JSX.Element {
  if (props.runs === null) {
    return <p className="jp-JiyuPanel-placeholder">Reading runs…</p>;
  }
  const runs = visibleRuns(props.runs, props.finished);
  if (runs.length === 0) {
    return (
      <p className="jp-JiyuPanel-placeholder">
        No runs yet. Train in a notebook with <code>%%train</code>, or submit a notebook as a
        background job (Submit job in its toolbar, or <code>jiyu submit</code>).
      </p>
    );
  }
  const differing = differingParams(runs);
  return (
    <>
      {props.selection && <CompareBar selection={props.selection} />}
      <ul className="jp-JiyuRunList" aria-label="Runs">
        {runs.map(run => (
          <RunRow key={run.id} {...props} run={run} differing={differing.get(run.id)} />
        ))}
      </ul>
    </>
  );
}

/** "Compare (n)" for the ticked runs: two or more. */
function CompareBar(props: { selection: ISelection }): JSX.Element {
  const ids = [...props.selection.ids];
  return (
    <div className="jp-JiyuCompareBar">
      <button
        type="button"
        className="jp-JiyuButton"
        disabled={ids.length < 2}
        title={ids.length < 2 ? 'Tick two or more runs to compare them' : undefined}
        onClick={() => props.selection.compare(ids)}
      >
        Compare ({ids.length})
      </button>
    </div>
  );
}

/**
 * How a run ended, in one line: a failure's error in red; a deliberate stop (where it stopped,
 * the command that resumes) as a note, since a stop is not an error. Paths are cut to their
 * last parts; the tooltip holds the whole line.
 */
export function RunDetail(props: { view: IRunView }): JSX.Element | null {
  const v = props.view;
  if (!v.detail) {
    return null;
  }
  return (
    <div className={v.detailIsError ? 'jp-JiyuRun-detail' : 'jp-JiyuRun-note'} title={v.detail}>
      {shortPaths(v.detail)}
    </div>
  );
}

/** "↳ resumed from 3fa2c1 at 30": the run a resumed run continues, from its record's summary. */
function RunLineage(props: { run: Run }): JSX.Element | null {
  const parent = props.run.summary.parent_run;
  if (!parent) {
    return null;
  }
  const step = props.run.summary.parent_step;
  return (
    <span
      className="jp-JiyuRun-lineage"
      title={`resumed from run ${parent}${step === null ? '' : ` at step ${step}`}; its page joins their curves`}
    >
      ↳ resumed from {parent.slice(0, 6)}
      {step === null ? '' : ` at ${step}`}
    </span>
  );
}

export function RunRow(props: { run: Run; differing?: string } & IRunActions): JSX.Element {
  const v = describeRun(props.run);
  const selection = props.selection;
  return (
    <li
      className={`jp-JiyuRun jp-mod-${v.status}`}
      data-run-id={v.id}
      aria-label={`Run ${v.name}, ${v.statusLabel}`}
    >
      <div className="jp-JiyuRun-head">
        {selection && (
          <input
            type="checkbox"
            className="jp-JiyuRun-select"
            aria-label={`Select ${v.name} (${v.id}) to compare`}
            checked={selection.ids.has(v.id)}
            onChange={() => selection.toggle(v.id)}
          />
        )}
        <span className="jp-JiyuRun-name" title={`${v.name} (${v.id})`}>
          {v.name}
        </span>
        <span className="jp-JiyuRun-kind" title={v.where ?? undefined}>
          {v.kind}
        </span>
      </div>
      {/* the status under the name, not beside it: at the sidebar's default width the chip
          and the kind left a name 8 characters */}
      <div className="jp-JiyuRun-meta">
        <span className={`jp-JiyuChip jp-mod-${v.status}`}>{v.statusLabel}</span>
        <span className="jp-JiyuRun-id" title={`run ${v.id}, started at ${v.meta.split(' · ')[1]}`}>
          {v.meta}
        </span>
        {props.differing && (
          <span
            className="jp-JiyuRun-params"
            title="what differs between runs of this name, as Compare finds it"
          >
            {props.differing}
          </span>
        )}
        <RunLineage run={props.run} />
      </div>
      {/* its own line, under the status it qualifies: beside the name it left the name no room */}
      <StallChip run={props.run} />
      {v.gpuText && <div className="jp-JiyuRun-gpus">{v.gpuText}</div>}
      <RunProgress view={v} />
      <Sparkline values={v.losses} />
      <div className="jp-JiyuRun-numbers">
        <span className="jp-JiyuRun-step">{v.stepText}</span>
        <span className="jp-JiyuRun-duration" title="wall time">
          {v.durationText}
        </span>
        <span className="jp-JiyuRun-loss">{v.lossText}</span>
        <span className="jp-JiyuRun-rate" title="samples per second">
          {v.rateText}
        </span>
      </div>
      <RunDetail view={v} />
      {v.note && <div className="jp-JiyuRun-note">{v.note}</div>}
      <div className="jp-JiyuRun-actions">
        {props.onOpen && (
          <button
            type="button"
            className="jp-JiyuButton"
            aria-label={`Open the page of ${v.name}`}
            onClick={() => props.onOpen!(props.run)}
          >
            Open
          </button>
        )}
        <button
          type="button"
          className="jp-JiyuButton"
          aria-label={`Open the log of ${v.name}`}
          onClick={() => props.onLogs(props.run)}
        >
          Logs
        </button>
        {props.onStacks && isStalled(props.run) && (
          <button
            type="button"
            className="jp-JiyuButton"
            aria-label={`Show every rank's stack of ${v.name}`}
            onClick={() => props.onStacks?.(props.run)}
          >
            Stacks
          </button>
        )}
        {v.canStop && (
          <button
            type="button"
            className="jp-JiyuButton jp-mod-stop"
            aria-label={`Stop ${v.name}`}
            onClick={() => props.onStop(props.run)}
          >
            Stop
          </button>
        )}
      </div>
    </li>
  );
}

function RunProgress(props: { view: IRunView }): JSX.Element {
  const v = props.view;
  const pct = v.progress === null ? null : Math.round(v.progress * 1000) / 10;
  const indeterminate = pct === null && v.active;
  return (
    <div
      className={`jp-JiyuProgress${indeterminate ? ' jp-mod-indeterminate' : ''}`}
      role="progressbar"
      aria-label={`Progress of ${v.name}`}
      aria-valuemin={0}
      aria-valuemax={100}
      aria-valuenow={pct ?? undefined}
      aria-valuetext={pct === null ? v.stepText : `${pct}%, ${v.stepText}`}
    >
      <div className="jp-JiyuProgress-fill" style={{ width: `${pct ?? 0}%` }} />
    </div>
  );
}

/** The sparkline's drawing box; the SVG stretches it to the card's width. */
export const SPARK_WIDTH = 200;
export const SPARK_HEIGHT = 24;

export function Sparkline(props: { values: Array<number | null> }): JSX.Element {
  const line = sparkline(props.values, SPARK_WIDTH, SPARK_HEIGHT, 2);
  return (
    <svg
      className="jp-JiyuSparkline"
      width="100%"
      height={SPARK_HEIGHT}
      viewBox={`0 0 ${SPARK_WIDTH} ${SPARK_HEIGHT}`}
      preserveAspectRatio="none"
      role="img"
      aria-label={line.label}
    >
      <title>{line.label}</title>
      {line.count > 0 && <polyline points={line.points} />}
    </svg>
  );
}
