/**
 * What a run row shows, derived from a run record: pure, so the rendering stays dumb and the
 * derivation is unit-tested.
 */

import * as fmt from './format';
import type { Run, RunStatus } from './api.generated';
import { ACTIVE_STATUSES } from './statuses';

export interface IRunView {
  id: string;
  name: string;
  status: RunStatus;
  /** The chip's text: the status, or "stopping" once a stop was asked for. */
  statusLabel: string;
  kind: string;
  /** Where a scheduled run is, e.g. "Slurm job 12"; null for runs on this machine. */
  where: string | null;
  active: boolean;
  canStop: boolean;
  /** 0-1, or null when the run has not said how many steps it will take. */
  progress: number | null;
  stepText: string;
  lossText: string;
  rateText: string;
  durationText: string;
  losses: Array<number | null>;
  detail: string | null;
  /** What tells runs of one name apart at a glance: short id and start time ("a1b2c3 · 14:02"). */
  meta: string;
  /** Whether `detail` is an error (red), or how a deliberate stop ended (a note). */
  detailIsError: boolean;
  /** Why a queued run waits where a scheduler holds it ("waiting: Resources"). */
  note: string | null;
  /** Its GPUs ("GPU 0, 1"), what a queued run waits for ("waits for 2 GPUs"), or null. */
  gpuText: string | null;
}

export function describeRun(run: Run): IRunView {
  const s = run.summary;
  const active = ACTIVE_STATUSES.includes(run.status);
  return {
    id: run.id,
    name: run.name,
    status: run.status,
    statusLabel: statusLabel(run, active),
    kind: kindText(run),
    where:
      run.backend !== 'local' && run.scheduler_id
        ? `${schedulerName(run.backend)} job ${run.scheduler_id}`
        : null,
    active,
    canStop: active && run.kind !== 'kernel' && !run.stop_requested,
    progress: s.progress ?? fmt.fraction(s.step, s.total_steps),
    stepText:
      run.kind === 'ranks' ? 'ranks pool' : stepText(s.step, s.total_steps, s.epoch, active),
    lossText: `loss ${fmt.loss(s.loss)}`,
    // a stalled run's last rate is history, not a rate: it is not shown while the stall lasts
    rateText: active && run.stalled_since !== null ? 'stalled' : fmt.rate(s.samples_per_s),
    durationText: fmt.duration(run.duration),
    losses: s.losses ?? [],
    detail: s.error ?? run.error ?? null,
    detailIsError: run.status !== 'stopped',
    meta: `${shortId(run.id)} · ${fmt.clock(run.started ?? run.created)}`,
    note: waiting(run),
    gpuText: gpuText(run)
  };
}

/** The first 6 characters of a run id: enough to tell runs apart, and a prefix jiyu takes. */
export function shortId(id: string): string {
  return id.slice(0, 6);
}

/**
 * Long absolute paths in a message cut to their last two parts ("…/ckpt/step-00000120.pt"),
 * the whole text kept for a tooltip: a stop's line names its checkpoint in full, which the
 * run page's checkpoint table already shows.
 */
export function shortPaths(text: string): string {
  return text.replace(/(?:\/[^\s/]+){3,}/g, match => {
    const trail = /[.,;:)]+$/.exec(match)?.[0] ?? '';
    const parts = match.slice(0, match.length - trail.length).split('/');
    return `…/${parts.slice(-2).join('/')}${trail}`;
  });
}

/** A job shows where it runs (slurm, kubernetes) and how many processes it has; a ranks pool its size. */
function kindText(run: Run): string {
  if (run.kind === 'ranks') {
    return `ranks ×${run.nproc * run.nnodes}`;
  }
  if (run.kind !== 'job') {
    return run.kind;
  }
  const where = run.backend && run.backend !== 'local' ? run.backend : 'job';
  return `${where} ×${run.nproc * run.nnodes}`;
}

function schedulerName(backend: string): string {
  return backend === 'slurm' ? 'Slurm' : backend === 'kubernetes' ? 'Kubernetes' : backend;
}

function waiting(run: Run): string | null {
  if (run.status === 'queued' && run.queue_reason) {
    return `waiting: ${run.queue_reason}`;
  }
  if (run.kind === 'ranks' && run.notebook) {
    return `driven by ${run.notebook.split('/').pop()}`; // a pool belongs to its notebook's kernel
  }
  return null;
}

function statusLabel(run: Run, active: boolean): string {
  if (active && run.stop_requested) {
    return 'stopping';
  }
  return run.status === 'queued' && run.queue_position
    ? `queued #${run.queue_position}`
    : run.status;
}

/** The GPUs a run holds (or held), or what a queued run waits for. */
export function gpuText(run: Run): string | null {
  const held = [...new Set((run.gpus ?? []).map(g => g.index))].sort((a, b) => a - b);
  if (held.length) {
    return `GPU ${held.join(', ')}`;
  }
  if (run.status === 'queued' && run.gpus_requested) {
    return `waits for ${run.gpus_requested} GPU${run.gpus_requested === 1 ? '' : 's'}`;
  }
  return null;
}

function stepText(
  step: number | null,
  total: number | null,
  epoch: number | null,
  active: boolean
): string {
  if (step === null) {
    // an ended run that logged no step (a notebook job without %%train) did not "start"
    return active ? 'starting' : 'no steps logged';
  }
  const of = total ? `/${total}` : '';
  return epoch === null ? `step ${step}${of}` : `step ${step}${of} · ep ${epoch}`;
}

/** Active runs first (newest first), then the `finished` most recent finished runs. */
export function visibleRuns(runs: ReadonlyArray<Run>, finished: number): Run[] {
  const newest = [...runs].sort((a, b) => b.created - a.created);
  const active = newest.filter(r => ACTIVE_STATUSES.includes(r.status));
  const done = newest.filter(r => !ACTIVE_STATUSES.includes(r.status));
  return [...active, ...done.slice(0, Math.max(0, finished))];
}
