/* eslint-disable */
/**
 * Every exchange of the jiyu REST API (each route's reply, a submission, a refusal) and its
 * words, generated from its JSON Schema (jiyu_magics/server/rest_schema.py) by
 * json-schema-to-typescript: `make api-types`.
 * Do not edit; tests/test_panel_types.py fails when this file is stale.
 */

/**
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunStatus".
 */
export type RunStatus =
  'queued' | 'starting' | 'running' | 'stopping' | 'succeeded' | 'failed' | 'stopped' | 'lost';
/**
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunKind".
 */
export type RunKind = 'kernel' | 'ddp' | 'job' | 'ranks';
/**
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "EventKind".
 */
export type EventKind =
  'start' | 'step' | 'val' | 'val_progress' | 'ckpt' | 'gpu' | 'advice' | 'stall' | 'end' | 'error';
/**
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RankState".
 */
export type RankState = 'running' | 'exited' | 'killed';
/**
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "ActiveStatus".
 */
export type ActiveStatus = 'queued' | 'starting' | 'running' | 'stopping';
/**
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "Event".
 */
export type Event =
  | {
      kind: 'start';
      t?: number | null;
      run_id?: string | null;
      name?: string | null;
      total_steps?: number | null;
      epochs?: number | null;
      steps_per_epoch?: number | null;
      nproc?: number | null;
      batch_size?: number | null;
      accum?: number | null;
      amp?: string | null;
      device?: string | null;
      params?: number | null;
      strategy?: string | null;
      backend?: string | null;
      data?: string | null;
      start_step?: number | null;
      resumed_from?: string | null;
      from_notebook?: string | null;
      stall_timeout?: number | null;
      track?: string | null;
      model?: string | null;
      optimizer?: string | null;
      optimizer_groups?: unknown[] | null;
      scheduler?: string | null;
      config?: {
        [k: string]: unknown;
      } | null;
      options?: {
        [k: string]: unknown;
      } | null;
      parent_run?: string | null;
      parent_step?: number | null;
    }
  | {
      kind: 'step';
      t?: number | null;
      step?: number | null;
      epoch?: number | null;
      loss?: number | null;
      lr?: number | null;
      samples_per_s?: number | null;
      mem_alloc?: number | null;
      mem_reserved?: number | null;
      mem_peak?: number | null;
      data_wait?: number | null;
      grad_norm?: number | null;
      elapsed?: number | null;
      eta?: number | null;
    }
  | {
      kind: 'val';
      t?: number | null;
      step?: number | null;
      epoch?: number | null;
      loss?: number | null;
      accuracy?: number | null;
    }
  | {
      kind: 'val_progress';
      t?: number | null;
      step?: number | null;
      batch?: number | null;
    }
  | {
      kind: 'ckpt';
      t?: number | null;
      step?: number | null;
      path?: string | null;
    }
  | {
      kind: 'gpu';
      t?: number | null;
    }
  | {
      kind: 'advice';
      t?: number | null;
      step?: number | null;
      message?: string | null;
    }
  | {
      kind: 'stall';
      t?: number | null;
      step?: number | null;
      since?: number | null;
      timeout?: number | null;
      stacks?: string | null;
      cleared?: number | null;
      lasted?: number | null;
    }
  | {
      kind: 'end';
      t?: number | null;
      status?: RunStatus | null;
      step?: number | null;
      message?: string | null;
      elapsed?: number | null;
      samples_per_s?: number | null;
      exit_code?: number | null;
      source?: string | null;
    }
  | {
      kind: 'error';
      t?: number | null;
      message?: string | null;
      step?: number | null;
      rank?: number | null;
      source?: string | null;
    };

export interface JiyuRESTAPI {
  [k: string]: unknown;
}
/**
 * A run's latest progress as every list view shows it (REST `summary`, `jiyu jobs`, `/metrics`); the panel's `RunSummary` is generated from it.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunSummary".
 */
export interface RunSummary {
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
  step_at: number | null;
  end_status: RunStatus | null;
  error: string | null;
  losses: number[];
  progress: number | null;
  parent_run: string | null;
  parent_step: number | null;
  device: string | null;
  tracked: {
    [k: string]: unknown;
  } | null;
}
/**
 * A lease as a run carries it (`Run.gpus`, the REST record's `gpus`).
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunGpu".
 */
export interface RunGpu {
  uuid: string;
  index: number;
  run_id: string;
  since: number;
  ended: number | null;
  shared: boolean;
}
/**
 * One checkpoint that exists (REST `GET /jiyu/api/runs/{id}/checkpoints`).
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunCheckpoint".
 */
export interface RunCheckpoint {
  step: number | null;
  path: string;
  bytes: number;
}
/**
 * One run for a client. Every key is always sent (`null` for "not known") except `params`: the runs list leaves parameters out, the run's own route sends them.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "Run".
 */
export interface Run {
  id: string;
  name: string;
  kind: RunKind;
  status: RunStatus;
  derived: boolean;
  backend: string;
  scheduler_id: string | null;
  nproc: number;
  nnodes: number;
  notebook: string | null;
  host: string;
  created: number;
  started: number | null;
  ended: number | null;
  duration: number | null;
  exit_code: number | null;
  error: string | null;
  stop_requested: boolean;
  stalled_since: number | null;
  gpus_requested: number | null;
  gpus: RunGpu[];
  queue_position: number | null;
  queue_reason: string | null;
  priority: number;
  share: boolean;
  summary: RunSummary;
  params?: {
    [k: string]: unknown;
  };
}
/**
 * `GET /jiyu/api/runs`: the newest runs, newest first, each with its params in short form.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunList".
 */
export interface RunList {
  runs: Run[];
}
/**
 * `GET /jiyu/api/runs/{id}/events`: the events after the offset asked for, and the offset to ask from next.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "EventChunk".
 */
export interface EventChunk {
  events: Event[];
  offset: number;
}
/**
 * `GET /jiyu/api/runs/{id}/log`: text from the offset asked for, and the run's state.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "LogChunk".
 */
export interface LogChunk {
  text: string;
  offset: number;
  size: number;
  active: boolean;
  status: RunStatus;
}
/**
 * A rank's record as the REST API (`GET /jiyu/api/runs/{id}/ranks`) sends it: the record, its state derived when read, and the name of the signal that killed it.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RankRecord".
 */
export interface RankRecord {
  rank: number;
  local_rank: number;
  pid: number;
  restart: number;
  started: number;
  ended: number | null;
  exit_code: number | null;
  error: string | null;
  cuda_visible_devices: string | null;
  stopped: boolean;
  signal: number | null;
  host: string | null;
  nnodes: number;
  state: RankState;
  signal_name: string | null;
}
/**
 * `GET /jiyu/api/runs/{id}/ranks`: each rank's own record, by rank.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RankList".
 */
export interface RankList {
  ranks: RankRecord[];
}
/**
 * One frame, with where it is in the notebook when the run's line map says.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "StackFrame".
 */
export interface StackFrame {
  file: string;
  line: number;
  func: string;
  kind: 'user' | 'library' | 'jiyu';
  cell: string | null;
  source: string | null;
}
/**
 * Ranks with identical stacks.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "StackGroup".
 */
export interface StackGroup {
  ranks: number[];
  hosts: {
    [k: string]: string;
  };
  headline: string;
  native: boolean;
  stopped: string | null;
  text: string;
  frames: StackFrame[];
}
/**
 * `GET /jiyu/api/runs/{id}/stacks`: a run's newest stack dump, grouped by identical stacks; `dumped` (its folder's name) null and no groups when none was taken.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "StackDump".
 */
export interface StackDump {
  run_id: string;
  dumped: string | null;
  groups: StackGroup[];
}
/**
 * `GET /jiyu/api/runs/{id}/checkpoints`: the checkpoints on disk, oldest first.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunCheckpoints".
 */
export interface RunCheckpoints {
  run_id: string;
  checkpoints: RunCheckpoint[];
  rotated: number;
}
/**
 * Who a GPU process belongs to (`owners.ProcessOwner` as data): a run, a kernel, another Unix user (`user`: only who, never what), someone else, or a pid outside this container.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "ProcessOwner".
 */
export interface ProcessOwner {
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
  user: string | null;
}
/**
 * A run's lease on a GPU with what views show of the run (`owners.Attribution`); another user's (on a shared box) carries only the user, the run's kind and the time.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "GpuLease".
 */
export interface GpuLease {
  uuid: string;
  index: number;
  run_id: string;
  since: number;
  ended: number | null;
  shared: boolean;
  run_name: string | null;
  run_kind: string | null;
  notebook: string | null;
  reported_memory: number | null;
  user: string | null;
  mine: boolean;
}
/**
 * A process NVML lists on a GPU, with its owner once attributed.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "GpuProcess".
 */
export interface GpuProcess {
  pid: number;
  used_memory: number | null;
  command: string | null;
  type: string;
  mine: boolean;
  owner: ProcessOwner | null;
}
/**
 * One GPU's readings (`None`: not supported), its processes, its leases and whether it is free.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "GpuDevice".
 */
export interface GpuDevice {
  index: number;
  visible_index: number | null;
  name: string | null;
  uuid: string | null;
  gpu_util: number | null;
  mem_util: number | null;
  mem_used: number | null;
  mem_total: number | null;
  mem_reserved: number | null;
  temperature: number | null;
  power_draw: number | null;
  power_limit: number | null;
  sm_clock: number | null;
  mig_mode: boolean | null;
  processes: GpuProcess[];
  leases: GpuLease[];
  foreign_memory: number | null;
  free: boolean | null;
}
/**
 * A kernel holding GPU memory, across GPUs.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "GpuKernel".
 */
export interface GpuKernel {
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
/**
 * A finding as data (`%gpu_doctor --json`, the REST API's `GpuStatus.doctor`).
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "Finding".
 */
export interface Finding {
  check: string;
  level: 'ok' | 'warning' | 'problem';
  summary: string;
  fix: string | null;
}
/**
 * `GET /jiyu/api/gpus`: the snapshot with owners, and what the panel shows beside it.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "GpuStatus".
 */
export interface GpuStatus {
  available: boolean;
  reason: string | null;
  driver_version: string | null;
  cuda_driver_version: string | null;
  visible_devices: string | null;
  devices: GpuDevice[];
  torch: {
    [k: string]: unknown;
  } | null;
  time: number;
  owners_note: string | null;
  doctor: Finding | null;
  kernels: GpuKernel[];
  busy_threshold: number;
  idle_warning_s: number;
}
/**
 * The body of every refusal (4xx, 503), as `APIHandler.write_error` writes it from the `HTTPError` raised here (or by Jupyter's own checks: a missing login is a 403).
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "ErrorReply".
 */
export interface ErrorReply {
  message: string;
  reason?: string | null;
  traceback?: string;
}
/**
 * The body of `POST /jiyu/api/runs`: a notebook under the server root, run as a background job.
 *
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "Submission".
 */
export interface Submission {
  notebook: string;
  params?: {
    [k: string]: unknown;
  };
  param_lines?: string[];
  nproc?: number;
  nnodes?: number;
  gpus?: number | null;
  priority?: number;
  share?: boolean;
  preemptible?: boolean;
  name?: string | null;
  backend?: 'local' | 'slurm' | 'kubernetes';
  stall_timeout?: number | null;
  track?: string[];
  slurm?: {
    time?: string | null;
    partition?: string | null;
    account?: string | null;
    qos?: string | null;
    constraint?: string | null;
    mem?: string | null;
    gpus_per_node?: number | null;
    sbatch_args?: string[];
    max_requeues?: number | null;
    checkpoint_grace?: number | null;
    join_timeout?: number | null;
  };
}
