"""deepeval metrics as spanjudge rules, judged through spanjudge's own engine.

Three pieces, all needing the optional extra ``spanjudge[deepeval]`` (deepeval is imported inside
them, never when ``spanjudge.evaluators`` is imported):

* :func:`as_deepeval_model` turns a spanjudge judge into deepeval's custom-model interface
  (``DeepEvalBaseLLM``), so a deepeval metric's judge calls go through our retries, JSON
  repair, concurrency slots and usage accounting;
* :class:`DeepEvalMetric` gives any deepeval ``BaseMetric`` / ``BaseConversationalMetric`` the
  shape of our metrics. :class:`~spanjudge.Rule` wraps one automatically, so
  it runs in the online loop like ours: sampling, budgets, leases, exactly-once delivery;
* :func:`trace_dict` turns the trajectory read from an agent's spans into the trace deepeval's
  agent metrics read (``TaskCompletionMetric``, ``StepEfficiencyMetric``, the plan metrics);
  :class:`DeepEvalMetric` gives it to them, so they run on any framework's spans.

Example::

    from deepeval.metrics import AnswerRelevancyMetric
    from spanjudge import Rule, as_deepeval_model
    from spanjudge.evaluators._judge.judges import LiteLLMJudge

    judge = LiteLLMJudge("gpt-4o-mini")
    rule = Rule(AnswerRelevancyMetric(threshold=0.7, model=as_deepeval_model(judge)),
                target="agent", sample_rate=0.1)
"""
