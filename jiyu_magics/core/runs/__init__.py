"""What a run is, apart from where it is stored: its words (kinds, statuses, event kinds), its
states and their transitions, its name rule, and the files of its folder."""
