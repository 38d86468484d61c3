"""A run's event log (``events.jsonl``): what one line is, appending and tailing it, and the one
fold that turns an event stream into the run's state."""
