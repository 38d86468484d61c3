/**
 * Who holds a GPU, in its card: the runs leasing it (or free / busy), each process's owner
 * (a run, a kernel and its notebook, someone else, a pid outside this container), and for a
 * kernel its memory, how long it has been idle and a "Shut down kernel" action. Plain React,
 * rendered from the snapshot's records.
 */

import * as React from 'react';

import * as fmt from './format';
import type { GpuDevice, GpuKernel, GpuLease, GpuProcess } from './api.generated';

export interface IKernelActions {
  /** Asks to shut a kernel down (the panel confirms first). */
  onShutdownKernel(kernel: GpuKernel): void;
  /** Asks to stop the run holding a lease (the server refuses another user's, in one line). */
  onStopLease?(lease: GpuLease): void;
}

/** Another user's lease on a shared box: the server sends only who, what kind, since when. */
export function isForeign(lease: GpuLease): boolean {
  return Boolean(lease.user) && lease.mine === false;
}

/** `2 h`, `12 min`, `40 s`: how long a lease has been held (the CLI's words). */
export function span(seconds: number): string {
  if (seconds >= 3600) {
    return `${Math.round(seconds / 3600)} h`;
  }
  return seconds >= 60
    ? `${Math.round(seconds / 60)} min`
    : `${Math.max(0, Math.round(seconds))} s`;
}

/** The file name of a notebook path, for a narrow sidebar. */
export function notebookName(path: string | null): string | null {
  return path ? (path.split('/').pop() ?? path) : null;
}

export function leaseText(lease: GpuLease, now: number = Date.now() / 1000): string {
  if (isForeign(lease)) {
    const shared = lease.shared ? ', shared' : '';
    return `${lease.user}, ${lease.run_kind ?? fmt.NA}, ${span(now - lease.since)}${shared}`;
  }
  const name = lease.run_name ?? lease.run_id;
  const notebook = notebookName(lease.notebook);
  const where = notebook ? ` · ${notebook}` : '';
  const shared = lease.shared ? ', shared' : '';
  return `${name} (${lease.run_id}, ${lease.run_kind ?? fmt.NA})${where} since ${fmt.clock(lease.since)}${shared}`;
}

export function GpuHolder(props: {
  device: GpuDevice;
  onStopLease?: (lease: GpuLease) => void;
}): JSX.Element | null {
  const d = props.device;
  if (d.leases.length) {
    return (
      <div className="jp-JiyuGpu-holder jp-mod-leased">
        {d.leases.map(lease => (
          <div
            key={`${lease.run_id}-${lease.since}`}
            className={`jp-JiyuGpu-lease${isForeign(lease) ? ' jp-mod-foreign' : ''}`}
            data-user={lease.user ?? undefined}
          >
            Leased by {isForeign(lease) ? '' : 'run '}
            {leaseText(lease)}
            {lease.reported_memory ? ` · reports ${fmt.gib(lease.reported_memory)} GiB` : ''}
            {props.onStopLease && (
              <button
                type="button"
                className="jp-JiyuButton jp-mod-stop"
                aria-label={`Stop the run leasing GPU ${d.index}`}
                onClick={() => props.onStopLease?.(lease)}
              >
                Stop
              </button>
            )}
          </div>
        ))}
      </div>
    );
  }
  if (d.free === null) {
    return null;
  }
  return d.free ? (
    <div className="jp-JiyuGpu-holder jp-mod-free">Free</div>
  ) : (
    <div className="jp-JiyuGpu-holder jp-mod-busy">
      Busy: {fmt.gib(d.foreign_memory)} GiB held outside jiyu
    </div>
  );
}

export function ProcessList(
  props: { device: GpuDevice; kernels: GpuKernel[] } & IKernelActions
): JSX.Element | null {
  const procs = props.device.processes;
  if (!procs.length) {
    return null;
  }
  return (
    <ul className="jp-JiyuGpu-procs" aria-label={`Processes on GPU ${props.device.index}`}>
      {procs.map(p => (
        <ProcessRow
          key={p.pid}
          process={p}
          kernel={props.kernels.find(k => k.kernel_id === p.owner?.kernel_id) ?? null}
          onShutdownKernel={props.onShutdownKernel}
        />
      ))}
    </ul>
  );
}

function ProcessRow(
  props: { process: GpuProcess; kernel: GpuKernel | null } & IKernelActions
): JSX.Element {
  const { process: p, kernel } = props;
  const owner = p.owner;
  const kind = owner?.kind ?? 'other';
  const idle = owner?.execution_state === 'idle' && owner.idle_s !== null;
  const warn = kernel?.idle_warning ?? false;
  return (
    <li className={`jp-JiyuProc jp-mod-${kind}${warn ? ' jp-mod-warn' : ''}`} data-pid={p.pid}>
      <span className="jp-JiyuProc-owner" title={p.command ?? `pid ${p.pid}`}>
        {owner?.label ?? `pid ${p.pid}`}
      </span>
      <span className="jp-JiyuProc-memory">{fmt.gib(p.used_memory)} GiB</span>
      {idle && (
        <span className="jp-JiyuProc-idle" title="idle since its last activity">
          idle {fmt.duration(owner!.idle_s)}
        </span>
      )}
      {kernel && (
        <button
          type="button"
          className="jp-JiyuButton jp-mod-stop"
          aria-label={`Shut down kernel of ${notebookName(kernel.notebook) ?? kernel.kernel_id}`}
          onClick={() => props.onShutdownKernel(kernel)}
        >
          Shut down kernel
        </button>
      )}
    </li>
  );
}

/** Kernels that hold GPU memory while idle longer than the threshold: what blocks others. */
export function IdleKernelWarnings(props: { kernels: GpuKernel[] }): JSX.Element | null {
  const idle = props.kernels.filter(k => k.idle_warning);
  if (!idle.length) {
    return null;
  }
  return (
    <div className="jp-JiyuPanel-warning" role="alert">
      {idle.map(k => (
        <div key={k.kernel_id}>
          {notebookName(k.notebook) ?? `kernel ${k.kernel_id.slice(0, 8)}`} holds{' '}
          {fmt.gib(k.memory)} GiB on GPU {k.gpus.join(', ')} and has been idle{' '}
          {fmt.duration(k.idle_s)}.
        </div>
      ))}
    </div>
  );
}
