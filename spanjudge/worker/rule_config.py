"""Rules from the worker's settings: ``[[rules]]`` entries and ``rules_entrypoint`` become
:class:`~spanjudge.Rule` objects; every error names the setting."""

from __future__ import annotations

import importlib
import inspect
import os
import re
from typing import Any

from spanjudge._core.kinds import MetricName
from spanjudge.errors import ConfigError, ParamError
from spanjudge.rule_settings import RuleConfig
from spanjudge.settings import WorkerSettings


def import_object(path: str, what: str) -> Any:
    """``"package.module:name"`` -> the object; errors name the setting."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what}: expected 'module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import module {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None


def make_judge(settings: WorkerSettings) -> Any:
    """The worker's judge from the ``judge_*`` settings; each error names the setting to fix."""
    from spanjudge.evaluators._judge.judges.litellm_judge import LiteLLMJudge

    key_env = settings.judge_api_key_env
    if key_env and not os.environ.get(key_env):
        raise ConfigError(f"judge_api_key_env: the variable {key_env} is not set or is empty")
    options = dict(settings.judge_options)
    if settings.judge_base_url:
        options["api_base"] = settings.judge_base_url
    missing = missing_openai_key(settings.judge_model, options, key_env)
    if missing:
        raise ConfigError(missing)
    try:
        return LiteLLMJudge(
            settings.judge_model,
            timeout=settings.judge_timeout,
            max_concurrency=settings.judge_max_concurrency,
            structured_output=settings.judge_structured_output,
            api_key_env=key_env,
            **options,
        )
    except (TypeError, ValueError) as exc:  # the options' values: the rest is checked above
        raise ConfigError(f"judge_options: {exc}") from exc


def missing_openai_key(model: str, options: dict[str, Any], key_env: str | None) -> str | None:
    """Why an OpenAI judge cannot authenticate, or None.

    Checked for OpenAI's own endpoint only (a server of your own may need no key), and only for
    OpenAI models (other providers' keys are litellm's to find). Without it the worker would
    start and every evaluation end in an authentication error."""
    from spanjudge.evaluators._judge.judges.direct import price_table

    if key_env or options.get("api_key") or os.environ.get("OPENAI_API_KEY"):
        return None
    if options.get("api_base") or options.get("base_url"):
        return None
    if os.environ.get("OPENAI_API_BASE") or os.environ.get("OPENAI_BASE_URL"):
        return None
    if not model.startswith("openai/"):
        if "/" in model:
            return None
        try:  # litellm's provider for a bare name, from the table it ships (no litellm import)
            entry = price_table(lambda: importlib.import_module("litellm")).get(model) or {}
        except Exception:
            return None
        if entry.get("litellm_provider") != "openai":
            return None
    return (
        f"judge_api_key_env: the judge {model} is an OpenAI model and OPENAI_API_KEY is not set "
        "(set it, or name the variable holding the key in judge_api_key_env)"
    )


def metric_class(config: RuleConfig) -> Any:
    """The metric class a rule names; ``geval`` on conversations is the conversational one."""
    import spanjudge

    # keyed by MetricName: a name added to the Literal without a class here is a test failure
    classes: dict[MetricName, Any] = {
        "faithfulness": spanjudge.FaithfulnessMetric,
        "bias": spanjudge.BiasMetric,
        "topic_adherence": spanjudge.TopicAdherenceMetric,
        "geval": spanjudge.ConversationalGEval
        if config.target == "conversation"
        else spanjudge.GEval,
        # deterministic checks on the agent's trajectory: no judge call
        "tool_errors": spanjudge.ToolErrorCheck,
        "repeated_tool_calls": spanjudge.RepeatedCallCheck,
        "step_limit": spanjudge.StepLimitCheck,
        # judged metrics of an agent's trajectory
        "task_completion": spanjudge.TaskCompletionMetric,
        "tool_correctness": spanjudge.ToolCorrectnessMetric,
        "argument_correctness": spanjudge.ArgumentCorrectnessMetric,
        "step_efficiency": spanjudge.StepEfficiencyMetric,
        "plan_adherence": spanjudge.PlanAdherenceMetric,
        "plan_quality": spanjudge.PlanQualityMetric,
        "goal_accuracy": spanjudge.GoalAccuracyMetric,
    }
    return classes[config.metric]


def check_params(cls: Any, params: dict[str, Any], where: str) -> None:
    """Unknown and missing parameters as ConfigErrors naming ``<where>.<key>``."""
    signature = inspect.signature(cls)
    for key in params:
        if key not in signature.parameters:
            allowed = ", ".join(signature.parameters)
            raise ConfigError(f"{where}.{key}: unknown parameter (allowed: {allowed})")
    for key, param in signature.parameters.items():
        if param.default is inspect.Parameter.empty and key not in params:
            raise ConfigError(f"{where}.{key}: missing (required by {cls.__name__})")


def _rule_error(message: str, where: str) -> str:
    """A Rule's error (``Rule.filter: Value error, unknown...``) keyed by the setting
    (``rules.0.filter: unknown...``)."""
    return re.sub(r"(^|; )Rule\.(\w+): (Value error, )?", rf"\g<1>{where}.\g<2>: ", message)


def build_rule(config: RuleConfig, judge: Any, index: int) -> Any:
    from spanjudge.evaluators._plan.rules import Rule

    where = f"rules.{index}"
    cls = metric_class(config)
    params = dict(config.params)
    params.setdefault("model", judge)
    check_params(cls, params, f"{where}.params")
    try:
        metric = cls(**params)
    except ParamError as exc:
        raise ConfigError(f"{where}.params.{exc.key}: {exc.message}") from exc
    except (TypeError, ValueError) as exc:  # "threshold must be between 0 and 1, got 5"
        raise ConfigError(f"{where}.params: {exc}") from exc
    build_case = (
        import_object(config.build_case, f"{where}.build_case") if config.build_case else None
    )
    try:
        return Rule(metric, **config.options(), filter=config.filter, build_case=build_case)
    except ConfigError as exc:  # "Rule.filter: ..." -> "rules.0.filter: ..."
        raise ConfigError(_rule_error(str(exc), where)) from exc


def build_rules(settings: WorkerSettings, judge: Any) -> list[Any]:
    """The configured rules, ``[[rules]]`` first, then the entry point's; every problem is a
    ConfigError naming the setting (no rules at all, a name used twice, an entry point that
    does not return Rule objects)."""
    rules = [build_rule(cfg, judge, i) for i, cfg in enumerate(settings.rules)]
    where = [f"rules.{i}" for i in range(len(rules))]
    if settings.rules_entrypoint:
        extra = _entrypoint_rules(settings.rules_entrypoint)
        rules.extend(extra)
        where += [f"rules_entrypoint (item {i})" for i in range(len(extra))]
    if not rules:
        raise ConfigError(
            "rules: no rules configured: add [[rules]] to the file or set rules_entrypoint"
        )
    first: dict[str, str] = {}
    for rule, place in zip(rules, where, strict=True):
        if rule.name in first:
            key = f"{place}.name" if place.startswith("rules.") else place
            raise ConfigError(
                f"{key}: the rule name {rule.name!r} is also {first[rule.name]}'s (names key the "
                "results: give each rule its own name)"
            )
        first[rule.name] = place
    return rules


def _entrypoint_rules(path: str) -> list[Any]:
    from spanjudge.evaluators._plan.rules import Rule

    factory = import_object(path, "rules_entrypoint")
    try:
        made = factory() if callable(factory) else factory
        found = list(made) if not isinstance(made, (str, bytes, Rule)) else None
    except Exception as exc:
        raise ConfigError(f"rules_entrypoint {path!r} raised: {exc}") from exc
    if found is None:
        raise ConfigError(
            f"rules_entrypoint {path!r} returned a {type(made).__name__}: expected a list of "
            "Rule objects"
        )
    for i, item in enumerate(found):
        if not isinstance(item, Rule):
            raise ConfigError(
                f"rules_entrypoint {path!r}: item {i} is a {type(item).__name__}, not a Rule"
            )
    return found
