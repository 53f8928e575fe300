"""Backbone × k × rescale-mode grids with one shared recipe (``sweep``), and their report (``report``)."""
