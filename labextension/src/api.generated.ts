/* eslint-disable */
/**
 * The jiyu REST API's run record, event log and their words, generated from its JSON Schema
 * (jiyu_magics/server/rest_schema.py) by json-schema-to-typescript: `make api-types`.
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
 * This interface was referenced by `JiyuRESTAPI`'s JSON-Schema
 * via the `definition` "RunCheckpoint".
 */
export interface RunCheckpoint {
  step: number | null;
  path: string;
  bytes: number;
}
/**
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
