"""Experiments: backbone × k × rescale-mode grids with one shared recipe (``sweep``), their report
(``report``) and paired tests (``stats``), simulated high-norm backbones (``inflate``), and the quickstart, the
one-command experiment diagnose → train → evaluate → explain → card (``quickstart``).
May import: every stage below ``export`` and ``cli``."""
