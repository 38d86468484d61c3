"""ipywidgets views: the live GPU table and the training dashboard."""
