/** Run and GPU records shaped like the server's replies (jiyu_magics/server). */

import type { GpuStatus, Run, RunSummary } from '../src/api.generated';

export function summary(fields: Partial<RunSummary> = {}): RunSummary {
  return {
    step: null,
    total_steps: null,
    epoch: null,
    loss: null,
    lr: null,
    samples_per_s: null,
    val_loss: null,
    val_acc: null,
    mem_peak: null,
    updated: null,
    step_at: null,
    end_status: null,
    error: null,
    losses: [],
    progress: null,
    parent_run: null,
    parent_step: null,
    device: null,
    tracked: null,
    ...fields
  };
}

export function run(fields: Partial<Run> = {}, s: Partial<RunSummary> = {}): Run {
  return {
    id: 'a1b2c3d4',
    name: 'digits-mlp',
    kind: 'job',
    status: 'running',
    derived: false,
    nproc: 2,
    nnodes: 1,
    notebook: '/work/train.ipynb',
    host: 'gpu-box',
    backend: 'local',
    created: 1000,
    started: 1001,
    ended: null,
    duration: 83.4,
    exit_code: null,
    error: null,
    stop_requested: false,
    scheduler_id: null,
    queue_reason: null,
    stalled_since: null,
    params: {},
    gpus_requested: 2,
    priority: 0,
    share: false,
    gpus: [],
    queue_position: null,
    summary: summary(s),
    ...fields
  };
}

export const GIB = 2 ** 30;

export function snapshot(fields: Partial<GpuStatus> = {}): GpuStatus {
  return {
    available: true,
    reason: null,
    driver_version: '550.54',
    cuda_driver_version: '12.4',
    visible_devices: null,
    time: 1000,
    torch: null,
    doctor: null,
    owners_note: null,
    kernels: [],
    busy_threshold: GIB,
    idle_warning_s: 1800,
    devices: [
      {
        index: 0,
        visible_index: 0,
        name: 'NVIDIA H100 80GB HBM3',
        uuid: 'GPU-1111',
        gpu_util: 45,
        mem_util: 30,
        mem_used: 12 * GIB,
        mem_total: 80 * GIB,
        mem_reserved: null,
        temperature: 54,
        power_draw: 250,
        power_limit: 700,
        sm_clock: 1980,
        mig_mode: false,
        processes: [],
        leases: [],
        foreign_memory: 0,
        free: true
      },
      {
        index: 1,
        visible_index: null,
        name: 'Tesla T4',
        uuid: 'GPU-9999',
        gpu_util: null,
        mem_util: null,
        mem_used: 15.5 * GIB,
        mem_total: 16 * GIB,
        mem_reserved: null,
        temperature: null,
        power_draw: null,
        power_limit: null,
        sm_clock: null,
        mig_mode: null,
        processes: [],
        leases: [],
        foreign_memory: 0,
        free: true
      }
    ],
    ...fields
  };
}
