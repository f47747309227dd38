"""Rules from the worker's settings: ``[[rules]]`` entries and ``rules_entrypoint`` become
:class:`~spanjudge.evaluators.online.Rule` objects; every error names the setting."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from spanjudge.exporters.kinds import MetricName
from spanjudge.settings import ConfigError, RuleConfig, WorkerSettings


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
    from spanjudge.evaluators.judges import LiteLLMJudge

    options = dict(settings.judge_options)
    if settings.judge_base_url:
        options["api_base"] = settings.judge_base_url
    try:
        return LiteLLMJudge(
            settings.judge_model,
            timeout=settings.judge_timeout,
            max_concurrency=settings.judge_max_concurrency,
            structured_output=settings.judge_structured_output,
            api_key_env=settings.judge_api_key_env,
            **options,
        )
    except ValueError as exc:
        raise ConfigError(f"judge_api_key_env: {exc}") from exc


def metric_class(config: RuleConfig) -> Any:
    """The metric class a rule names; ``geval`` on conversations is the conversational one."""
    from spanjudge.evaluators import metrics

    # keyed by MetricName: a name added to the Literal without a class here is a test failure
    classes: dict[MetricName, Any] = {
        "faithfulness": metrics.FaithfulnessMetric,
        "bias": metrics.BiasMetric,
        "topic_adherence": metrics.TopicAdherenceMetric,
        "geval": metrics.ConversationalGEval if config.target == "conversation" else metrics.GEval,
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


def build_rule(config: RuleConfig, judge: Any, index: int) -> Any:
    from spanjudge.evaluators.metrics.geval_params import ParamError
    from spanjudge.evaluators.online import Rule

    where = f"rules.{index}"
    cls = metric_class(config)
    params = dict(config.params)
    params.setdefault("model", judge)
    check_params(cls, params, f"{where}.params")
    try:
        metric = cls(**params)
    except ParamError as exc:
        raise ConfigError(f"{where}.params.{exc.key}: {exc.message}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}.params: {exc}") from exc
    build_case = (
        import_object(config.build_case, f"{where}.build_case") if config.build_case else None
    )
    try:
        return Rule(
            metric,
            target=config.target,
            sample_rate=config.sample_rate,
            filter=config.filter,
            max_per_minute=config.max_per_minute,
            max_cost_per_day=config.max_cost_per_day,
            name=config.name,  # type: ignore[arg-type]  # None picks the default name
            build_case=build_case,
        )
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def build_rules(settings: WorkerSettings, judge: Any) -> list[Any]:
    rules = [build_rule(cfg, judge, i) for i, cfg in enumerate(settings.rules)]
    if settings.rules_entrypoint:
        factory = import_object(settings.rules_entrypoint, "rules_entrypoint")
        try:
            extra = factory() if callable(factory) else factory
        except Exception as exc:
            raise ConfigError(
                f"rules_entrypoint {settings.rules_entrypoint!r} raised: {exc}"
            ) from exc
        rules.extend(list(extra))
    if not rules:
        raise ConfigError("no rules: add [[rules]] to the config file or set rules_entrypoint")
    return rules
