"""Evaluation: test cases, judges, metrics, ``evaluate()`` and the online loop, by stage.

Internal: the public names are :mod:`spanjudge`'s. The stages a span goes through, each a
package (see ``docs/architecture.md``): :mod:`._plan` (rules, sampling, budgets),
:mod:`._rebuild` (reading spans back into test cases and trajectories), :mod:`._judge`
(metrics, judges, offline ``evaluate()``), and beside them the online loop (:mod:`._loop`), the
review of results (:mod:`._review`) and enrich mode (:mod:`._enrich`).
"""
