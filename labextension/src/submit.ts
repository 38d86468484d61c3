/**
 * "Submit notebook as background job": a dialog for processes, name and parameters, then
 * `POST /jiyu/api/runs`. The notebook is saved first: the job runs the file on disk.
 */

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { JiyuApi } from './api';
import { ISubmitValues, parameterNames, toSubmission } from './params';
import type { Run, Submission } from './api.generated';

export class SubmitForm extends Widget implements Dialog.IBodyWidget<ISubmitValues> {
  constructor(notebookPath: string, nproc: number, parameterNames: string[] = []) {
    super();
    this.addClass('jp-JiyuSubmit');
    const where = document.createElement('p');
    where.textContent = `Runs ${notebookPath} under torchrun in the background; it keeps going when the browser or the kernel goes away.`;
    this._nproc = field('number', String(nproc));
    this._nproc.min = '1';
    this._name = field('text', '');
    this._name.placeholder = 'defaults to the notebook name';
    this._params = document.createElement('textarea');
    this._params.rows = 4;
    this._params.placeholder = 'lr = 3e-4\nepochs = 5';
    const names = document.createElement('p');
    names.className = 'jp-JiyuSubmit-names';
    names.textContent = parameterNames.length
      ? `The parameters cell sets: ${parameterNames.join(', ')}`
      : 'This notebook has no cell tagged "parameters": -p values have nothing to override.';
    this._error.className = 'jp-JiyuSubmit-error';
    this._error.setAttribute('role', 'alert');
    this.node.append(
      where,
      labelled('Processes per node (GPUs)', this._nproc),
      labelled('Run name', this._name),
      labelled('Parameters, one "name = value" a line', this._params),
      names,
      this._error
    );
  }

  /** What the user typed before, and why it was refused (shown in the dialog). */
  setValue(values: ISubmitValues, refusal: string): void {
    this._nproc.value = values.nproc;
    this._name.value = values.name;
    this._params.value = values.params;
    this._error.textContent = refusal ? `Not submitted: ${refusal}` : '';
  }

  getValue(): ISubmitValues {
    return {
      nproc: this._nproc.value,
      name: this._name.value,
      params: this._params.value
    };
  }

  private _nproc: HTMLInputElement;
  private _name: HTMLInputElement;
  private _params: HTMLTextAreaElement;
  private _error = document.createElement('p');
}

function field(type: string, value: string): HTMLInputElement {
  const input = document.createElement('input');
  input.type = type;
  input.value = value;
  input.className = 'jp-mod-styled';
  return input;
}

function labelled(text: string, control: HTMLElement): HTMLLabelElement {
  const label = document.createElement('label');
  const span = document.createElement('span');
  span.textContent = text;
  label.append(span, control);
  return label;
}

/**
 * The run the server created, or null when the user cancelled. A refusal (an invalid value
 * here, a 400 from the server, e.g. an unknown parameter) is shown in the dialog, which opens
 * again with what was typed, until the user submits something valid or cancels.
 */
export async function submitNotebook(
  notebook: NotebookPanel,
  api: JiyuApi,
  nproc: number
): Promise<Run | null> {
  const path = notebook.context.path;
  const names = notebookParameters(notebook);
  let typed: ISubmitValues = { nproc: String(nproc), name: '', params: '' };
  let refusal = '';
  for (;;) {
    // a new form each time: a closed dialog disposes its body
    const form = new SubmitForm(path, nproc, names);
    form.setValue(typed, refusal);
    const result = await showDialog({
      title: 'Submit notebook as background job',
      body: form,
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Submit' })],
      focusNodeSelector: 'input'
    });
    if (!result.button.accept || !result.value) {
      return null;
    }
    typed = result.value;
    try {
      const submission: Submission = toSubmission(path, result.value);
      if (notebook.context.model.dirty) {
        await notebook.context.save();
      }
      return await api.submit(submission);
    } catch (error) {
      refusal = (error as Error).message;
    }
  }
}

function notebookParameters(notebook: NotebookPanel): string[] {
  const cells = notebook.content.model?.cells;
  if (!cells) {
    return [];
  }
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    const tags = (cell.getMetadata('tags') as string[] | undefined) ?? [];
    if (cell.type === 'code' && tags.includes('parameters')) {
      return parameterNames(cell.sharedModel.getSource());
    }
  }
  return [];
}
