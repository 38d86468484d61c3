/**
 * The shapes the jiyu server extension answers with (jiyu_magics/server). One GPU snapshot
 * record is the same as `%gpu_status --json`. A run, its progress summary, its GPU leases, the
 * status/kind/event words and the event lines come from `api.generated.ts`, generated from the
 * REST API's JSON Schema (`make api-types`), so they cannot drift from the Python side.
 */

import { ActiveStatus, Run, RunCheckpoint, RunGpu, RunStatus, RunSummary } from './api.generated';

export type { Event, EventKind, RunKind, RunStatus } from './api.generated';
export type IRun = Run;
export type IRunSummary = RunSummary;
export type IRunGpu = RunGpu;

/** Every active status once and nothing else: the compiler checks it against the schema. */
const ACTIVE: Record<ActiveStatus, true> = {
  queued: true,
  starting: true,
  running: true,
  stopping: true
};

export const ACTIVE_STATUSES: ReadonlyArray<RunStatus> = Object.keys(ACTIVE) as ActiveStatus[];

export interface IGpuProcess {
  pid: number;
  used_memory: number | null;
  command: string | null;
  type: string;
  mine: boolean;
  owner: IProcessOwner | null;
}

/** Who a GPU process belongs to (jiyu_magics/core/gpu/owners.py). */
export interface IProcessOwner {
  /** `user`: another Unix user's process on a shared box (only who, never what). */
  kind: 'run' | 'kernel' | 'other' | 'outside' | 'user';
  label: string;
  run_id: string | null;
  run_name: string | null;
  run_kind: string | null;
  notebook: string | null;
  kernel_id: string | null;
  session_id: string | null;
  execution_state: string | null;
  idle_s: number | null;
}

/** A run's lease on a GPU, with what the panel shows of the run. */
export interface IGpuLease extends IRunGpu {
  run_name: string | null;
  run_kind: string | null;
  notebook: string | null;
  /** GPU memory the run itself reports (torch's peak), bytes. */
  reported_memory: number | null;
  /** On a shared box: the Unix user whose lease it is (another user's shows only user, kind, time). */
  user?: string | null;
  /** False for another user's lease on a shared box. */
  mine?: boolean;
}

/** A kernel holding GPU memory, across GPUs. */
export interface IGpuKernel {
  kernel_id: string;
  session_id: string | null;
  notebook: string | null;
  execution_state: string | null;
  idle_s: number | null;
  run_id: string | null;
  memory: number;
  gpus: number[];
  idle_warning: boolean;
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
  leases: IGpuLease[];
  /** Bytes held by processes none of its leases accounts for. */
  foreign_memory: number | null;
  /** Not leased and foreign memory within the busy threshold; null when unknown. */
  free: boolean | null;
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
  /** Why leases and owners are missing (the run store cannot be read), else null. */
  owners_note: string | null;
  kernels: IGpuKernel[];
  /** Bytes of foreign memory above which a GPU is busy. */
  busy_threshold: number;
  /** Seconds a kernel may hold GPU memory while idle before the panel warns. */
  idle_warning_s: number;
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
  /** GPUs to lease; absent: one per process. */
  gpus?: number;
  /** Seconds without a step before the job is flagged stalled (0: off); absent: the rule. */
  stall_timeout?: number;
  /** Trackers to follow the run in: `tensorboard[:DIR]`, `mlflow[:URI]`, a comma list. */
  track?: string;
  /** Where it runs: 'local' (absent), 'slurm' or 'kubernetes'. */
  backend?: string;
  /** Nodes (a Slurm or Kubernetes job); absent: one. */
  nnodes?: number;
  /** jiyu submit's Slurm options by field name, e.g. { gpus_per_node: 0, time: '1:00:00' }. */
  slurm?: Record<string, unknown>;
}

/** One group of ranks with identical stacks (`GET /jiyu/api/runs/{id}/stacks`, views/stack_view.py). */
export interface IStackGroup {
  ranks: number[];
  /** "rank 1 is in train_step (job.py:17)". */
  headline: string;
  /** The main thread's frames, innermost first (views/stack_view.py `as_json`). */
  frames: IStackFrame[];
  /** Every thread, as faulthandler (and py-spy, where it ran) wrote it. */
  text: string;
  native: boolean;
  /** The ranks' process state when they were stopped (SIGSTOP): no stack until continued. */
  stopped?: string | null;
}

/** One frame, with where it is in the notebook when the run's line map says. */
export interface IStackFrame {
  file: string;
  line: number;
  func: string;
  /** The user's code, a library's, or what carries it to the rank (jiyu, IPython, runpy, torchrun). */
  kind?: 'user' | 'library' | 'jiyu';
  /** "cell 3, line 9" for a frame of an exported notebook's job. */
  cell?: string | null;
  /** That line's text. */
  source?: string | null;
}

/** A run's newest stack dump: `dumped` is its folder's name; null and no groups when none. */
export interface IStackDump {
  run_id: string;
  dumped: string | null;
  groups: IStackGroup[];
}

/** `GET /jiyu/api/runs/{id}/checkpoints`: the checkpoints on disk, oldest first. */
export interface IRunCheckpoints {
  run_id: string;
  checkpoints: RunCheckpoint[];
  /** Recorded by the run, gone since (`--keep-ckpts` rotated them out, or deleted). */
  rotated: number;
}
