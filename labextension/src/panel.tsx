/**
 * The left-sidebar panel: a ReactWidget re-rendering PanelBody whenever the model changes.
 * Stop asks for confirmation; Logs opens the log view through a command so the layout
 * restorer can bring it back after a reload.
 */

import { Dialog, Notification, ReactWidget, showDialog, UseSignal } from '@jupyterlab/apputils';
import * as React from 'react';

import { ISelection, PanelBody } from './components';
import { StacksBody } from './stall';
import { jiyuIcon } from './icons';
import { PanelModel } from './model';
import { leaseText, notebookName } from './owners';
import * as fmt from './format';
import type { GpuKernel, GpuLease, Run } from './api.generated';

export const PANEL_ID = 'jiyu-panel';

export class JiyuPanel extends ReactWidget {
  constructor(
    readonly model: PanelModel,
    private readonly openLog: (run: Run) => void,
    private readonly shutdownKernel: (kernelId: string) => Promise<void>,
    private readonly openRun?: (run: Run) => void,
    private readonly compare?: (runIds: string[]) => void
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-JiyuPanel');
    this.title.icon = jiyuIcon;
    this.title.caption = 'JiyuTrainer: GPUs and runs';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'JiyuTrainer GPUs and runs');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => (
          <PanelBody
            gpus={this.model.gpus}
            runs={this.model.runs}
            error={this.model.error}
            finished={this.model.finished}
            onStop={run => void this.confirmStop(run)}
            onLogs={this.openLog}
            onStacks={run => void this.showStacks(run)}
            onOpen={this.openRun}
            selection={this.compare ? this.selection() : undefined}
            onShutdownKernel={kernel => void this.confirmShutdown(kernel)}
            onStopLease={lease => void this.confirmStopLease(lease)}
          />
        )}
      </UseSignal>
    );
  }

  /** The runs ticked for Compare; kept across refreshes and after Compare. */
  private selection(): ISelection {
    return {
      ids: this._selected,
      toggle: id => {
        this._selected = new Set(this._selected);
        if (!this._selected.delete(id)) {
          this._selected.add(id);
        }
        this.model.notify();
      },
      // the ticks stay: untick one and compare again, or see which runs the open Compare shows
      compare: ids => this.compare?.(ids)
    };
  }

  private _selected: Set<string> = new Set();

  /** Asks first: a stop ends the run's whole process group after a checkpoint grace period. */
  async confirmStop(run: Run): Promise<boolean> {
    const answer = await showDialog({
      title: `Stop ${run.name}?`,
      body: `Run ${run.id} gets SIGTERM to checkpoint and exit, then SIGKILL after the grace period.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop run' })],
      defaultButton: 0 // Enter cancels: stopping is the deliberate choice
    });
    if (!answer.button.accept) {
      return false;
    }
    try {
      const stopped = await this.model.api.stop(run.id);
      Notification.info(`${stopped.name}: ${stopped.status}`, { autoClose: 4000 });
    } catch (error) {
      Notification.error(`Could not stop ${run.name}: ${(error as Error).message}`);
    }
    this.model.refreshSoon();
    return true;
  }

  /** Stop from a GPU card: the run holding the lease. Another user's on a shared box is
   * refused by the server in one line (403), shown as the refusal. */
  async confirmStopLease(lease: GpuLease): Promise<boolean> {
    const holder = leaseText(lease);
    const answer = await showDialog({
      title: `Stop the run leasing GPU ${lease.index}?`,
      body: `${holder}: SIGTERM to checkpoint and exit, then SIGKILL after the grace period.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop run' })],
      defaultButton: 0
    });
    if (!answer.button.accept) {
      return false;
    }
    try {
      const stopped = await this.model.api.stop(lease.run_id);
      Notification.info(`${stopped.name}: ${stopped.status}`, { autoClose: 4000 });
    } catch (error) {
      Notification.error(`Could not stop ${holder}: ${(error as Error).message}`);
    }
    this.model.refreshSoon();
    return true;
  }

  /** Every rank's stack of a stalled run, grouped by identical stacks. */
  async showStacks(run: Run): Promise<void> {
    try {
      const dump = await this.model.api.stacks(run.id);
      await showDialog({
        title: `Stacks of ${run.name} (${run.id})`,
        body: <StacksBody dump={dump} />,
        buttons: [Dialog.okButton({ label: 'Close' })]
      });
    } catch (error) {
      Notification.error(`Could not read the stacks of ${run.name}: ${(error as Error).message}`);
    }
  }

  /** Asks first: shutting a kernel down frees its GPU memory and loses its variables. */
  async confirmShutdown(kernel: GpuKernel): Promise<boolean> {
    const name = notebookName(kernel.notebook) ?? `kernel ${kernel.kernel_id.slice(0, 8)}`;
    const answer = await showDialog({
      title: `Shut down the kernel of ${name}?`,
      body:
        `Kernel ${kernel.kernel_id.slice(0, 8)} holds ${fmt.gib(kernel.memory)} GiB on GPU ` +
        `${kernel.gpus.join(', ')}. Shutting it down frees that memory; everything defined in it is lost.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Shut down kernel' })],
      defaultButton: 0 // Enter cancels: losing a kernel's state is the deliberate choice
    });
    if (!answer.button.accept) {
      return false;
    }
    try {
      await this.shutdownKernel(kernel.kernel_id);
      Notification.info(`Shut down the kernel of ${name}`, { autoClose: 4000 });
    } catch (error) {
      Notification.error(`Could not shut down the kernel of ${name}: ${(error as Error).message}`);
    }
    this.model.refreshSoon();
    return true;
  }

  protected onAfterShow(): void {
    this.model.refreshSoon();
  }
}
