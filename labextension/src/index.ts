/**
 * jiyu-magics for JupyterLab: the GPUs-and-runs sidebar, the run log views, and the
 * "Submit notebook as background job" command (notebook toolbar and command palette).
 */

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, Notification, WidgetTracker } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { SplitPanel, TabPanel, Widget } from '@lumino/widgets';

import { JiyuApi } from './api';
import { jiyuIcon } from './icons';
import { CompareView } from './compare';
import { LogView } from './logview';
import { RunPage } from './runpage';
import { PanelModel } from './model';
import { JiyuPanel } from './panel';
import { submitNotebook } from './submit';
import type { Run } from './api.generated';

const PLUGIN_ID = 'jiyu-magics:panel';

export namespace CommandIDs {
  export const openLog = 'jiyu:open-log';
  export const openRun = 'jiyu:open-run';
  export const compare = 'jiyu:compare-runs';
  export const submit = 'jiyu:submit-notebook';
  export const showPanel = 'jiyu:show-panel';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'GPUs and training runs in the left sidebar; submit notebooks as background jobs.',
  autoStart: true,
  optional: [ILayoutRestorer, ISettingRegistry, ICommandPalette, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    settings: ISettingRegistry | null,
    palette: ICommandPalette | null,
    notebooks: INotebookTracker | null
  ) => {
    const api = new JiyuApi();
    let panel: JiyuPanel | null = null;
    const model = new PanelModel({
      api,
      interval: 2,
      hidden: () => !panel?.isVisible
    });
    const logs = new WidgetTracker<MainAreaWidget<LogView>>({ namespace: 'jiyu-log' });
    const openLog = (run: Pick<Run, 'id' | 'name'>) =>
      app.commands.execute(CommandIDs.openLog, { id: run.id, name: run.name });
    const pages = new WidgetTracker<MainAreaWidget<RunPage>>({ namespace: 'jiyu-run' });
    const comparisons = new WidgetTracker<MainAreaWidget<CompareView>>({
      namespace: 'jiyu-compare'
    });
    panel = new JiyuPanel(
      model,
      openLog,
      id => app.serviceManager.kernels.shutdown(id),
      run => app.commands.execute(CommandIDs.openRun, { id: run.id, name: run.name }),
      ids => app.commands.execute(CommandIDs.compare, { ids })
    );
    app.shell.add(panel, 'left', { rank: 850 });
    restorer?.add(panel, panel.id);

    app.commands.addCommand(CommandIDs.showPanel, {
      label: 'Show GPUs and runs',
      caption: 'The JiyuTrainer panel: GPUs, runs, Logs, Compare',
      icon: jiyuIcon,
      execute: () => app.shell.activateById(panel!.id)
    });
    app.commands.addCommand(CommandIDs.openLog, {
      label: args => (args.name ? `Log of ${args.name}` : 'Open run log'),
      icon: jiyuIcon,
      execute: args => {
        const id = String(args.id);
        const open = logs.find(w => w.content.runId === id);
        if (open) {
          reveal(app, open);
          return open;
        }
        const widget = new MainAreaWidget({
          content: new LogView(api, id, String(args.name ?? id))
        });
        widget.id = `jiyu-log-area-${id}`;
        // the first log opens beside what is in front; the next ones join its tab area, so
        // two logs do not squeeze the notebook to a strip
        const sibling = logs.find(w => w.isAttached && w.parent !== null);
        void logs.add(widget);
        openBeside(
          app,
          widget,
          sibling ? { ref: sibling.id, mode: 'tab-after' } : { mode: 'split-right' }
        );
        return widget;
      }
    });
    app.commands.addCommand(CommandIDs.openRun, {
      label: args => (args.name ? `Open run ${args.name}` : 'Open run page'),
      icon: jiyuIcon,
      execute: args => {
        const id = String(args.id);
        const open = pages.find(w => w.content.runId === id);
        if (open) {
          reveal(app, open);
          return open;
        }
        const widget = new MainAreaWidget({
          content: new RunPage(
            api,
            id,
            String(args.name ?? id),
            run => {
              void panel!.confirmStop(run).then(() => widget.content.refreshSoon());
            },
            (parentId, name) => app.commands.execute(CommandIDs.openRun, { id: parentId, name })
          )
        });
        widget.id = `jiyu-run-area-${id}`;
        void pages.add(widget);
        openBeside(app, widget);
        return widget;
      }
    });
    app.commands.addCommand(CommandIDs.compare, {
      label: 'Compare runs',
      icon: jiyuIcon,
      execute: args => {
        const ids = ((args.ids as unknown as string[] | undefined) ?? []).map(String);
        const open = comparisons.find(w => w.content.runIds.join('-') === ids.join('-'));
        if (open) {
          reveal(app, open);
          return open;
        }
        const widget = new MainAreaWidget({ content: new CompareView(api, ids) });
        widget.id = `jiyu-compare-area-${ids.join('-')}`;
        void comparisons.add(widget);
        openBeside(app, widget);
        return widget;
      }
    });
    app.commands.addCommand(CommandIDs.submit, {
      label: 'Submit notebook as background job',
      caption: 'Run this notebook under torchrun in the background (JiyuTrainer)',
      icon: jiyuIcon,
      isEnabled: () => !!notebooks?.currentWidget,
      execute: async () => {
        const notebook = notebooks?.currentWidget;
        if (!notebook) {
          return;
        }
        const gpus = model.gpus?.devices.length || 1;
        try {
          const run = await submitNotebook(notebook, api, gpus);
          if (run) {
            Notification.success(`Submitted ${run.name} (${run.id})`, { autoClose: 5000 });
            app.shell.activateById(panel!.id);
            model.refreshSoon();
          }
        } catch (error) {
          Notification.error(`Submission failed: ${(error as Error).message}`);
        }
      }
    });
    palette?.addItem({ command: CommandIDs.submit, category: 'JiyuTrainer' });
    palette?.addItem({ command: CommandIDs.showPanel, category: 'JiyuTrainer' });
    notebooks?.currentChanged.connect(() => app.commands.notifyCommandChanged(CommandIDs.submit));

    if (restorer) {
      void restorer.restore(pages, {
        command: CommandIDs.openRun,
        args: w => ({ id: w.content.runId, name: w.content.runName }),
        name: w => w.content.runId
      });
      void restorer.restore(comparisons, {
        command: CommandIDs.compare,
        args: w => ({ ids: w.content.runIds }),
        name: w => w.content.runIds.join('-')
      });
      void restorer.restore(logs, {
        command: CommandIDs.openLog,
        args: w => ({ id: w.content.runId, name: w.content.runName }),
        name: w => w.content.runId
      });
    }
    if (settings) {
      void settings.load(PLUGIN_ID).then(loaded => {
        const apply = () => {
          model.interval = loaded.get('refreshInterval').composite as number;
          model.finished = loaded.get('finishedRuns').composite as number;
          model.notify();
        };
        apply();
        loaded.changed.connect(apply);
      });
    }
  }
};

/**
 * Into the main area, or, where that holds one document only (Notebook 7: a second main
 * widget is silently dropped), into the panel below it.
 */
function openBeside(
  app: JupyterFrontEnd,
  widget: MainAreaWidget,
  where?: { mode: 'split-right' | 'tab-after'; ref?: string }
): void {
  app.shell.add(widget, 'main', where);
  if (!widget.isAttached) {
    app.shell.add(widget, 'down');
    giveRoom(widget);
  }
  reveal(app, widget);
}

/**
 * Brings a view to the front. Notebook 7's panel below the notebook is a tab panel whose
 * `activateById` focuses a widget without selecting its tab: every view opened after the
 * first stayed behind it, so the tab is selected here too.
 */
function reveal(app: JupyterFrontEnd, widget: Widget): void {
  const tabs = widget.parent?.parent;
  if (tabs instanceof TabPanel && tabs.widgets.includes(widget)) {
    tabs.currentWidget = widget;
  }
  app.shell.activateById(widget.id);
}

/** The panel below the notebook opens as a bare tab bar: give it about half the height. */
function giveRoom(widget: Widget): void {
  for (let parent = widget.parent; parent; parent = parent.parent) {
    if (parent instanceof SplitPanel && parent.widgets.length === 2) {
      const [main, down] = parent.relativeSizes();
      if (down < 0.3 * (main + down)) {
        parent.setRelativeSizes([0.55, 0.45]);
      }
      return;
    }
  }
}

export default plugin;
