/**
 * The shapes the jiyu server extension answers with (jiyu_magics/server). One GPU snapshot
 * record is the same as `%gpu_status --json`; one run is the store's row plus `summary`, the
 * run state folded from its event log (`core.run_state.RunSummary`).
 *
 * The run's shapes and the status/kind unions mirror the Python side: tests/test_panel_types.py
 * checks them against the JSON Schema `python -m jiyu_magics.server.rest_schema` writes.
 */

export type RunStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'stopped' | 'lost';

export const ACTIVE_STATUSES: ReadonlyArray<RunStatus> = ['queued', 'running'];

export type RunKind = 'kernel' | 'ddp' | 'job';

/** The kinds of line in a run's `events.jsonl` (`/jiyu/api/runs/{id}/events`). */
export type EventKind =
  'start' | 'step' | 'val' | 'ckpt' | 'gpu' | 'advice' | 'stall' | 'end' | 'error';

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
  /** When the step last moved (epoch seconds of the step event that moved it). */
  step_at: number | null;
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
  /** Sent by GET /jiyu/api/runs/{id} only: the runs list leaves parameters out. */
  params?: Record<string, unknown>;
  /** The run's recorded process: a job's supervisor, or torchrun for a kernel's `%%train --nproc`. */
  pid: number | null;
  pid_started: number | null;
  pgid: number | null;
  /** The process that records the run's end (the kernel, the supervisor): not lost while it lives. */
  owner_pid: number | null;
  owner_started: number | null;
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
  /** While running: when its last optimizer step was logged, which has not moved since for the
   * run's stall timeout (a flag beside `running`, not a status); null otherwise. */
  stalled_since: number | null;
  /** GPUs the run waits for or leased (0: a CPU job; null: it never queues, e.g. in a kernel). */
  gpus_requested: number | null;
  priority: number;
  /** Its order among waiting runs of one priority (the submission time unless moved up). */
  queue_rank: number | null;
  share: boolean;
  /** The GPUs it holds (live leases) or held (ended ones). */
  gpus: IRunGpu[];
  /** 1-based place in the queue while queued, else null. */
  queue_position: number | null;
  duration: number | null;
  summary: IRunSummary;
}

export interface IRunGpu {
  uuid: string;
  index: number;
  run_id: string;
  since: number;
  ended: number | null;
  shared: boolean;
}

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
  kind: 'run' | 'kernel' | 'other' | 'outside';
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
}

/** One group of ranks with identical stacks (`GET /jiyu/api/runs/{id}/stacks`, views/stack_view.py). */
export interface IStackGroup {
  ranks: number[];
  /** "rank 1 is in train_step (job.py:17)". */
  headline: string;
  /** The main thread's frames, innermost first. */
  frames: Array<{ file: string; line: number; func: string }>;
  /** Every thread, as faulthandler (and py-spy, where it ran) wrote it. */
  text: string;
  native: boolean;
}

/** A run's newest stack dump: `dumped` is its folder's name; null and no groups when none. */
export interface IStackDump {
  run_id: string;
  dumped: string | null;
  groups: IStackGroup[];
}
