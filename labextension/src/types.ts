/**
 * The shapes the jiyu server extension answers with (jiyu_magics/server). One GPU snapshot
 * record is the same as `%gpu_status --json`; one run is the store's row plus `summary`, the
 * run state folded from its event log (`core.run_state.RunSummary`).
 *
 * The run's shapes and the status/kind unions mirror the Python side: tests/test_panel_types.py
 * checks them against the JSON Schema `python -m jiyu_magics.server.rest_schema` writes.
 */

export type RunStatus =
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'stopped'
  | 'lost';

export const ACTIVE_STATUSES: ReadonlyArray<RunStatus> = ['queued', 'running'];

export type RunKind = 'kernel' | 'ddp' | 'job';

/** The kinds of line in a run's `events.jsonl` (`/jiyu/api/runs/{id}/events`). */
export type EventKind =
  | 'start'
  | 'step'
  | 'val'
  | 'ckpt'
  | 'gpu'
  | 'advice'
  | 'stall'
  | 'end'
  | 'error';

export interface IRunSummary {
  total_steps: number | null;
  step: number | null;
  epoch: number | null;
  loss: number | null;
  lr: number | null;
  samples_per_s: number | null;
  val_loss: number | null;
  val_acc: number | null;
  mem_peak: number | null;
  updated: number | null;
  /** How the current `fit` call ended; null while it runs. */
  end_status: RunStatus | null;
  /** The current call's first error across ranks ("rank 1: ..."). */
  error: string | null;
  losses: number[];
  progress: number | null;
}

export interface IRun {
  id: string;
  name: string;
  kind: RunKind;
  status: RunStatus;
  nproc: number;
  nnodes: number;
  notebook: string | null;
  cwd: string | null;
  host: string;
  backend: string;
  params: Record<string, unknown>;
  pid: number | null;
  pid_started: number | null;
  pgid: number | null;
  created: number;
  started: number | null;
  ended: number | null;
  exit_code: number | null;
  error: string | null;
  stop_requested: boolean;
  stop_grace: number | null;
  /** The scheduler's name for the job where one holds it (Slurm job id, Kubernetes kind/name). */
  scheduler_id: string | null;
  /** Why a queued run waits, in the words of whoever holds it (Slurm: Resources, Priority). */
  queue_reason: string | null;
  /** When a scheduler was last asked about the run (epoch seconds). */
  polled: number | null;
  duration: number | null;
  summary: IRunSummary;
}

export interface IGpuProcess {
  pid: number;
  used_memory: number | null;
  command: string | null;
  type: string;
  mine: boolean;
}

export interface IGpuDevice {
  index: number;
  visible_index: number | null;
  name: string | null;
  uuid: string | null;
  gpu_util: number | null;
  mem_util: number | null;
  mem_used: number | null;
  mem_total: number | null;
  temperature: number | null;
  power_draw: number | null;
  power_limit: number | null;
  sm_clock: number | null;
  mig_mode: boolean | null;
  processes: IGpuProcess[];
}

export interface IFinding {
  check: string;
  level: 'ok' | 'warning' | 'problem';
  summary: string;
  fix: string | null;
}

export interface IGpuSnapshot {
  available: boolean;
  reason: string | null;
  driver_version: string | null;
  cuda_driver_version: string | null;
  visible_devices: string | null;
  devices: IGpuDevice[];
  time: number;
  /** The doctor's first finding, present when no GPU is visible. */
  doctor: IFinding | null;
}

export interface ILogChunk {
  text: string;
  offset: number;
  size: number;
  active: boolean;
  status: RunStatus;
}

export interface ISubmission {
  notebook: string;
  nproc: number;
  /** `name = value` lines as typed; the server reads them as `-p NAME VALUE` is read. */
  param_lines: string[];
  name?: string;
}
