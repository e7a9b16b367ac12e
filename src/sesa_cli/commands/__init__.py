"""One thin Hydra app per command: compose -> typed config -> library call -> artifacts."""
