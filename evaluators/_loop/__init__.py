"""The loop: claimed jobs judged, results stored once and delivered once.

:mod:`.monitor` (the online loop itself), :mod:`.schedule` (its ticks), :mod:`.drain` (a tick's
jobs on an event loop), :mod:`.runner` (a job becomes a result), :mod:`.batch_spans` (a claim's
traces read once), :mod:`.result_cache` (the same question paid for once), :mod:`.delivery`
(each result leaves once per output), :mod:`.config`.
"""
