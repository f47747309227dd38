"""OpenTelemetry metric instrument names and their label keys.

The Prometheus exporter (``opentelemetry-exporter-prometheus``) turns dots into underscores and
adds ``_total`` to counters. Instruments carry no unit on purpose, so no unit suffix is added and
the scraped names stay predictable. Observed in a real scrape
(tests/exporters/emit/test_telemetry.py checks every one of them)::

    spanjudge_evaluation_score_bucket / _sum / _count   histogram  metric, label, service, rule
    spanjudge_evaluations_total                         counter    metric, label, service, rule
    spanjudge_evaluation_lag_seconds_bucket / _sum / _count  histogram  metric
    spanjudge_judge_tokens_total                        counter    metric, model, direction
    spanjudge_judge_cost_usd_total                      counter    metric, model
    spanjudge_judge_calls_total                         counter    metric, model
    spanjudge_judge_cache_hits_total                    counter    metric, rule
    spanjudge_backlog                                   gauge      state
    spanjudge_backlog_oldest_age_seconds                gauge      (none)
    spanjudge_sampler_skipped_total                     counter    rule, reason
    spanjudge_exporter_dropped_spans_total              counter    reason
    spanjudge_exporter_written_spans_total              counter    (none)
    spanjudge_emitter_dropped_spans_total               counter    reason, output
    spanjudge_emitter_events_not_accepted_total         counter    (none)
    spanjudge_receiver_requests_total                   counter    code, encoding
    spanjudge_receiver_spans_total                      counter    encoding
    spanjudge_enrich_forwarded_spans_total              counter    held
    spanjudge_enrich_forward_failed_spans_total         counter    (none)
    spanjudge_planner_unrecognised_spans_total          counter    service
    spanjudge_rules_no_target_total                     counter    rule, reason
    spanjudge_judge_agreement                           gauge      rule, metric, stat
    spanjudge_judge_outages_total                       counter    (none)
    spanjudge_judge_failed_attempts_total               counter    (none)
    spanjudge_judge_gave_up_total                       counter    (none)
    spanjudge_judge_down                                gauge      (none)
    spanjudge_planner_late_spans_total                  counter    (none)
    spanjudge_planner_replanned_total                   counter    kind
    spanjudge_store_file_changes_total                  counter    (none)
    spanjudge_ingest_spans_total                        counter    outcome

Plus ``target_info`` (resource attributes) from the exporter. Dashboards and alert rules under
``deploy/`` use these scraped names.
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
# Counter of results reused from the judge-result cache (no judge call), labels: metric, rule
JUDGE_CACHE_HITS: Final = "spanjudge.judge.cache_hits"
# Observable gauge of work waiting, labels: state
# (pending|leased|unplanned_traces|unplanned_conversations)
BACKLOG: Final = "spanjudge.backlog"
# Observable gauge: age in seconds of the oldest settled-but-unevaluated target
BACKLOG_AGE: Final = "spanjudge.backlog.oldest_age_seconds"
# Counter of targets not evaluated, labels: rule, reason
# (not_sampled|rate_budget|cost_budget|filtered|implausible_field: the plausibility gate refused
# a rebuilt field, evaluators/_rebuild/plausibility.py)
SAMPLER_SKIPPED: Final = "spanjudge.sampler.skipped"
# The reason label (and result error_type) of a case the plausibility gate refused
IMPLAUSIBLE_FIELD: Final = "implausible_field"
# Counter of spans the store exporter dropped, labels: reason (queue_full|store_error)
EXPORTER_DROPPED: Final = "spanjudge.exporter.dropped_spans"
EXPORTER_WRITTEN: Final = "spanjudge.exporter.written_spans"
# Counter of evaluation results the score emitter dropped, labels: reason
# (queue_full|export_failed|invalid_record|shutdown) and output (span|event: the evaluation span
# or the gen_ai.evaluation.result log event; the name predates the event output)
EMITTER_DROPPED: Final = "spanjudge.emitter.dropped_spans"
# Counter of evaluation events (and label events) settled unsent because the logs endpoint does
# not take logs (it answered 404/405/501: Jaeger, Tempo and Phoenix take traces only); the
# results no longer owe them (exporters/_emit/logs_refusal.py)
EMITTER_EVENTS_NOT_ACCEPTED: Final = "spanjudge.emitter.events_not_accepted"
# Receiver counters, labels: code (HTTP status) / encoding
RECEIVER_REQUESTS: Final = "spanjudge.receiver.requests"
RECEIVER_SPANS: Final = "spanjudge.receiver.spans"
# Enrich mode: spans forwarded to the backend, labels: held (true: it waited for its scores)
ENRICH_FORWARDED: Final = "spanjudge.enrich.forwarded_spans"
# Enrich mode: spans whose forwarding failed (they stay in the outbox and are sent again)
ENRICH_FORWARD_FAILED: Final = "spanjudge.enrich.forward_failed_spans"
# Counter of spans in settled traces that no GenAI dialect recognised, labels: service
# (not GenAI steps such as HTTP calls, or a library spanjudge cannot read yet: the planner logs
# each new shape once, `spanjudge explain TRACE_ID` shows how every span was read)
PLANNER_UNRECOGNISED_SPANS: Final = "spanjudge.planner.unrecognised_spans"
# Counter of settled traces (conversations for no_turns) in which a rule found no target,
# labels: rule, reason (no_span_of_kind|filtered|no_genai_span|no_root_span|no_conversation|
# no_turns; see evaluators/_plan/coverage.py)
RULES_NO_TARGET: Final = "spanjudge.rules.no_target"
# Drop reasons: the ``reason`` label values of the exporter's and the emitter's dropped counters.
# Spelled here, not in the modules that drop, so that telemetry can start every series at 0
# without importing the exporters (which import telemetry).
QUEUE_FULL: Final = "queue_full"
SHUTDOWN: Final = "shutdown"
STORE_ERROR: Final = "store_error"
INVALID_SPAN: Final = "invalid_span"  # a span the converter could not read
INVALID_LOG: Final = "invalid_log"  # a log record the converter could not read
INVALID_RECORD: Final = "invalid_record"
EXPORT_FAILED: Final = "export_failed"
EXPORTER_DROP_REASONS: Final = (QUEUE_FULL, STORE_ERROR, INVALID_SPAN, INVALID_LOG, SHUTDOWN)
EMITTER_DROP_REASONS: Final = (QUEUE_FULL, INVALID_RECORD, EXPORT_FAILED, SHUTDOWN)

NO_TARGET_REASONS: Final = (
    "no_span_of_kind",  # the trace has GenAI spans, none of the rule's kind
    "filtered",  # spans of the rule's kind, every one refused by its filter
    "no_genai_span",  # no span any dialect reads, and no trace of the tick gave a target
    "no_root_span",  # trace rules: the root span never arrived
    "no_conversation",  # conversation rules: turns without a conversation id
    "no_turns",  # conversation rules: a conversation without agent or LLM turns
)

# Observable gauge of judge-human agreement over the configured window, labels: rule, metric,
# stat (labels|accuracy|true_positive_rate|true_negative_rate|kappa, plus the configured
# floor and min_labels the alert compares them with; see evaluators/_review/agreement.py)
JUDGE_AGREEMENT: Final = "spanjudge.judge.agreement"
AGREEMENT_STATS: Final = (
    "labels",
    "accuracy",
    "true_positive_rate",
    "true_negative_rate",
    "kappa",
    "floor",
    "min_labels",
)

# Judge outages as this process saw them (evaluators/_loop/outage.py JudgeHealth), read
# per scrape: outages begun, attempts failed transiently (timeouts, 429, 5xx, connection errors),
# evaluations recorded as errors after their last attempt; the gauge is 1 while an outage lasts
JUDGE_OUTAGES: Final = "spanjudge.judge.outages"
JUDGE_FAILED_ATTEMPTS: Final = "spanjudge.judge.failed_attempts"
JUDGE_GAVE_UP: Final = "spanjudge.judge.gave_up"
JUDGE_DOWN: Final = "spanjudge.judge.down"
# Late arrivals planned again (evaluators/_plan/late_arrivals.py LateCounts), read per scrape:
# spans that came after their trace was planned, and what was planned again, labels: kind
# (trace: a trace re-planned for late spans | conversation: judged again over new turns)
PLANNER_LATE_SPANS: Final = "spanjudge.planner.late_spans"
PLANNER_REPLANNED: Final = "spanjudge.planner.replanned"
REPLANNED_KINDS: Final = ("trace", "conversation")
# Times the SQLite store file was found deleted or replaced while open (SQLiteStore.file_changes;
# no series for a PostgreSQL store)
STORE_FILE_CHANGES: Final = "spanjudge.store.file_changes"
# Counter of received spans by what the worker's ingest did with them
# (spanjudge/worker/keep_policy.py),
# labels: outcome (stored | not_sampled: no rule can pick the trace, not stored | held: waiting
# for the span naming the conversation | released: stored out of that buffer | expired: no
# conversation named in time | overflow: dropped from the full buffer)
INGEST_SPANS: Final = "spanjudge.ingest.spans"
INGEST_OUTCOMES: Final = ("stored", "not_sampled", "held", "released", "expired", "overflow")

# label keys
L_KIND: Final = "kind"
L_STAT: Final = "stat"
L_METRIC: Final = "metric"
L_LABEL: Final = "label"
L_OUTPUT: Final = "output"
L_SERVICE: Final = "service"
L_RULE: Final = "rule"
L_MODEL: Final = "model"
L_DIRECTION: Final = "direction"
L_STATE: Final = "state"
L_REASON: Final = "reason"
L_CODE: Final = "code"
L_ENCODING: Final = "encoding"
L_HELD: Final = "held"
L_OUTCOME: Final = "outcome"
