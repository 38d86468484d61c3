/**
 * The panel's React views: GPU cards and run rows, rendered from plain records. They import
 * nothing from JupyterLab so unit tests render them with react-dom/server.
 */

import * as React from 'react';

import * as fmt from './format';
import { sparkline } from './sparkline';
import { IGpuDevice, IGpuSnapshot, IRun } from './types';
import { describeRun, IRunView, visibleRuns } from './view';

export interface IRunActions {
  onStop(run: IRun): void;
  onLogs(run: IRun): void;
}

export interface IPanelBodyProps extends IRunActions {
  gpus: IGpuSnapshot | null;
  runs: IRun[] | null;
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
        <GpuSection snapshot={props.gpus} />
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
        />
      </section>
    </div>
  );
}

export function GpuSection(props: { snapshot: IGpuSnapshot | null }): JSX.Element {
  const snap = props.snapshot;
  if (snap === null) {
    return <p className="jp-JiyuPanel-placeholder">Reading GPUs…</p>;
  }
  if (!snap.available) {
    return <NoGpu snapshot={snap} />;
  }
  return (
    <ul className="jp-JiyuGpuList" aria-label="GPUs">
      {snap.devices.map(d => (
        <GpuCard key={d.index} device={d} />
      ))}
    </ul>
  );
}

function NoGpu(props: { snapshot: IGpuSnapshot }): JSX.Element {
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

export function GpuCard(props: { device: IGpuDevice }): JSX.Element {
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
      <div className="jp-JiyuGpu-foot">
        <span title="temperature">
          {d.temperature === null ? fmt.NA : `${d.temperature}°C`}
        </span>
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
  runs: IRun[] | null;
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
        No runs yet. Train with <code>%%train</code>, or submit this notebook as a
        background job from its toolbar.
      </p>
    );
  }
  return (
    <ul className="jp-JiyuRunList" aria-label="Runs">
      {runs.map(run => (
        <RunRow key={run.id} run={run} onStop={props.onStop} onLogs={props.onLogs} />
      ))}
    </ul>
  );
}

export function RunRow(props: { run: IRun } & IRunActions): JSX.Element {
  const v = describeRun(props.run);
  return (
    <li
      className={`jp-JiyuRun jp-mod-${v.status}`}
      data-run-id={v.id}
      aria-label={`Run ${v.name}, ${v.statusLabel}`}
    >
      <div className="jp-JiyuRun-head">
        <span className={`jp-JiyuChip jp-mod-${v.status}`}>{v.statusLabel}</span>
        <span className="jp-JiyuRun-name" title={`${v.name} (${v.id})`}>
          {v.name}
        </span>
        <span className="jp-JiyuRun-kind" title={v.where ?? undefined}>
          {v.kind}
        </span>
      </div>
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
      {v.detail && <div className="jp-JiyuRun-detail">{v.detail}</div>}
      {v.note && <div className="jp-JiyuRun-note">{v.note}</div>}
      <div className="jp-JiyuRun-actions">
        <button
          type="button"
          className="jp-JiyuButton"
          aria-label={`Open the log of ${v.name}`}
          onClick={() => props.onLogs(props.run)}
        >
          Logs
        </button>
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
