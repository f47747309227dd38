"""Planning: settled traces and idle conversations become one job per (rule, target).

:mod:`.rules` (what runs where, how often), :mod:`.sampler` (deterministic sampling, budgets),
:mod:`.planner` (job rows from settled work), :mod:`.coverage` (what could not be read, counted).
"""
