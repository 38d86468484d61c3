/**
 * The shapes the jiyu server extension answers with (jiyu_magics/server). One GPU snapshot
 * record is the same as `%gpu_status --json`; one run is the store's row plus `summary`, the
 * condensed event log (`core.events.summarize`).
 */

export type RunStatus =
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'stopped'
  | 'lost';

export const ACTIVE_STATUSES: ReadonlyArray<RunStatus> = ['queued', 'running'];

export interface IRunSummary {
  step: number | null;
  total_steps: number | null;
  epoch: number | null;
  loss: number | null;
  lr: number | null;
  samples_per_s: number | null;
  val_loss: number | null;
  val_acc: number | null;
  mem_peak: number | null;
  updated: number | null;
  end_status: string | null;
  error: string | null;
  losses: Array<number | null>;
  progress: number | null;
}

export interface IRun {
  id: string;
  name: string;
  kind: 'kernel' | 'ddp' | 'job';
  status: RunStatus;
  nproc: number;
  nnodes: number;
  notebook: string | null;
  created: number;
  started: number | null;
  ended: number | null;
  duration: number | null;
  exit_code: number | null;
  error: string | null;
  stop_requested: boolean;
  params: Record<string, unknown>;
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
