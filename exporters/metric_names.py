"""OpenTelemetry metric instrument names and their label keys.

The Prometheus exporter turns dots into underscores and adds ``_total`` to counters, so
``spanjudge.evaluations`` is scraped as ``spanjudge_evaluations_total``. Dashboards and alert
rules under ``deploy/`` use the scraped names; a test checks them against a real scrape.
Instruments carry no unit suffix on purpose: it keeps the scraped names predictable.
"""

from __future__ import annotations

from typing import Final

METER_NAME: Final = "spanjudge"

# Histogram of scores, labels: metric, label (pass|fail), service, rule
EVALUATION_SCORE: Final = "spanjudge.evaluation.score"
# Counter of finished evaluations, labels: metric, label (pass|fail|error|skipped), service, rule
EVALUATIONS: Final = "spanjudge.evaluations"
# Histogram of seconds from the evaluated target's end to its score being emitted, labels: metric
EVALUATION_LAG: Final = "spanjudge.evaluation.lag_seconds"
# Counters of judge spend, labels: metric, model, direction (input|output) for tokens
JUDGE_TOKENS: Final = "spanjudge.judge.tokens"
JUDGE_COST: Final = "spanjudge.judge.cost_usd"
JUDGE_CALLS: Final = "spanjudge.judge.calls"
# Observable gauge of work waiting, labels: state
# (pending|leased|unplanned_traces|unplanned_conversations)
BACKLOG: Final = "spanjudge.backlog"
# Observable gauge: age in seconds of the oldest settled-but-unevaluated target
BACKLOG_AGE: Final = "spanjudge.backlog.oldest_age_seconds"
# Counter of targets not evaluated, labels: rule, reason
# (not_sampled|rate_budget|cost_budget|missing_field|filtered)
SAMPLER_SKIPPED: Final = "spanjudge.sampler.skipped"
# Counter of spans the store exporter dropped, labels: reason (queue_full|store_error)
EXPORTER_DROPPED: Final = "spanjudge.exporter.dropped_spans"
EXPORTER_WRITTEN: Final = "spanjudge.exporter.written_spans"
# Counter of evaluation spans the score emitter dropped, labels: reason
# (queue_full|export_failed|invalid_record|shutdown)
EMITTER_DROPPED: Final = "spanjudge.emitter.dropped_spans"
# Receiver counters, labels: code (HTTP status) / encoding
RECEIVER_REQUESTS: Final = "spanjudge.receiver.requests"
RECEIVER_SPANS: Final = "spanjudge.receiver.spans"

# label keys
L_METRIC: Final = "metric"
L_LABEL: Final = "label"
L_SERVICE: Final = "service"
L_RULE: Final = "rule"
L_MODEL: Final = "model"
L_DIRECTION: Final = "direction"
L_STATE: Final = "state"
L_REASON: Final = "reason"
L_CODE: Final = "code"
L_ENCODING: Final = "encoding"
