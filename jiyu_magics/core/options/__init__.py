"""Options declared once: ``OptionSpec`` (what a door needs of one option: its flags, type,
default, help, choices, bounds) and the options more than one door takes (``run_options``).
``fit``'s options (``train.fit_options``), a submission's (``jobs.submit_options``) and
``%ranks start``'s are declared with it; parsers, docs and checks are made from it."""
