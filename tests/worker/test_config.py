"""Worker configuration: file + env, errors naming the bad key, entry-point rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge.errors import ConfigError
from spanjudge.settings import load_settings
from spanjudge.worker.rule_config import build_rules
from tests.worker.rules_module import NO_JUDGE, custom_case

TOML = """
store_url = "sqlite:///x.db"
receiver_port = 4319
judge_model = "openai/scripted-judge"

[[rules]]
metric = "faithfulness"
target = "llm"
sample_rate = 0.25
params = { threshold = 0.6 }
filter = { service = "support-bot" }
"""

YAML = """
store_url: postgresql://postgres@127.0.0.1:5432/test
mode: child-span
rules:
  - metric: bias
    target: agent
  - metric: topic_adherence
    target: conversation
    params: {relevant_topics: [orders]}
"""


def test_toml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPANJUDGE_STORE_URL", raising=False)
    path = tmp_path / "w.toml"
    path.write_text(TOML)
    settings = load_settings(path)
    assert settings.receiver_port == 4319
    assert settings.receiver_host == "127.0.0.1"
    assert settings.rules[0].sample_rate == 0.25
    rules = build_rules(settings, NO_JUDGE)
    assert len(rules) == 1
    assert rules[0].target == "llm"


def test_yaml_file_and_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(YAML)
    monkeypatch.setenv("SPANJUDGE_RECEIVER_PORT", "9999")
    monkeypatch.setenv("SPANJUDGE_SERVICE_NAME", "judge-svc")
    monkeypatch.setenv("SPANJUDGE_STORE_URL", "sqlite:///env.db")
    settings = load_settings(path)
    assert settings.receiver_port == 9999
    assert settings.service_name == "judge-svc"
    assert settings.store_url == "sqlite:///env.db"  # env beats the file
    assert [r.metric for r in settings.rules] == ["bias", "topic_adherence"]
    assert len(build_rules(settings, NO_JUDGE)) == 2


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("recever_port = 1\n", "recever_port: unknown key"),
        ('receiver_port = "abc"\n', "receiver_port"),
        ('[[rules]]\nmetric = "toxicity"\n', "rules.0.metric"),
        ('[[rules]]\nmetric = "bias"\ntarget = "tool"\n', "rules.0.target"),
        ('[[rules]]\nmetric = "bias"\nsample_rate = 1.5\n', "rules.0.sample_rate"),
        ('[[rules]]\nmetric = "bias"\ncolour = 1\n', "rules.0.colour: unknown key"),
        # the loop's keys, declared in LoopSettings and shared with MonitorConfig
        ("interval_seconds = 0\n", "interval_seconds: Input should be greater than 0"),
        ("concurrency = true\n", "concurrency: expected a number"),
        ("batch_size = 0\n", "batch_size: Input should be greater than or equal to 1"),
        ("judge_cache = 1\n", "judge_cache: expected true or false"),
        ("retention_seconds = -5\n", "retention_seconds: Input should be greater than 0"),
        ('[[rules]]\nmetric = "geval"\ntarget = "llmm"\n', "rules.0.target"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "w.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert key in str(info.value)


def test_env_wrong_type_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANJUDGE_CONCURRENCY", "many")
    with pytest.raises(ConfigError, match="concurrency"):
        load_settings(None)


def test_each_bad_key_is_one_line_of_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANJUDGE_JUDGE_CACHE", "maybe")
    monkeypatch.setenv("SPANJUDGE_SETTLE_SECONDS", "-1")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    heading, *lines = str(info.value).splitlines()
    assert heading == "invalid worker configuration (environment):"
    assert sorted(line.split(":")[0].strip() for line in lines) == [
        "judge_cache",
        "settle_seconds",
    ]


def test_loop_keys_from_the_environment_reach_the_monitor_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPANJUDGE_JUDGE_CACHE", "false")
    monkeypatch.setenv("SPANJUDGE_RETRY_DELAY_SECONDS", "2.5")
    config = load_settings(None, idle_seconds=0).monitor_config()
    assert (config.judge_cache, config.retry_delay_seconds, config.idle_seconds) == (
        False,
        2.5,
        0.0,
    )


JSON = """
{
  "store_url": "sqlite:///j.db",
  "receiver_port": 4320,
  "judge_options": {"api_base": "http://127.0.0.1:9/v1"},
  "rules": [{"metric": "faithfulness", "sample_rate": 0.5, "params": {"threshold": 0.8}}]
}
"""


def test_json_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPANJUDGE_STORE_URL", raising=False)
    monkeypatch.delenv("SPANJUDGE_RECEIVER_PORT", raising=False)
    path = tmp_path / "w.json"
    path.write_text(JSON)
    settings = load_settings(path)
    assert settings.store_url == "sqlite:///j.db"
    assert settings.receiver_port == 4320
    assert settings.judge_options == {"api_base": "http://127.0.0.1:9/v1"}
    assert settings.rules[0].params == {"threshold": 0.8}
    assert len(build_rules(settings, NO_JUDGE)) == 1


def test_yml_extension_is_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPANJUDGE_STORE_URL", raising=False)
    path = tmp_path / "w.yml"
    path.write_text(YAML)
    settings = load_settings(path)
    assert settings.store_url == "postgresql://postgres@127.0.0.1:5432/test"
    assert settings.rules[1].params == {"relevant_topics": ["orders"]}


def test_keyword_overrides_beat_env_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.toml"
    path.write_text(
        'store_url = "sqlite:///file.db"\nservice_name = "from-file"\nconcurrency = 2\n'
    )
    monkeypatch.setenv("SPANJUDGE_STORE_URL", "sqlite:///env.db")
    monkeypatch.setenv("SPANJUDGE_SERVICE_NAME", "from-env")
    settings = load_settings(path, store_url="sqlite:///code.db")
    assert settings.store_url == "sqlite:///code.db"
    assert settings.service_name == "from-env"
    assert settings.concurrency == 2


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("w.toml", "this is = = not toml", "not valid TOML"),
        ("w.yaml", "rules: [unclosed\n", "not valid YAML"),
        ("w.yml", "a: b: c\n", "not valid YAML"),
        ("w.json", '{"store_url": "sqlite:///x.db",}', "not valid JSON"),
        ("w.yaml", "- metric: bias\n", "top level must be a table/mapping"),
        ("w.json", '[["store_url", "sqlite:///x.db"]]', "top level must be a table/mapping"),
        ("w.json", '"store_url"', "top level must be a table/mapping"),
    ],
)
def test_broken_file_names_the_file(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_yaml_file_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("receiver_port: many\nrules:\n  - metric: bias\n    colour: red\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert f"invalid worker configuration ({path})" in message
    assert "receiver_port" in message
    assert "rules.0.colour: unknown key" in message


def test_missing_or_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read config file .*no such file"):
        load_settings(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match=r"cannot read config file .*not a file"):
        load_settings(tmp_path)
    path = tmp_path / "w.json"
    path.write_bytes(b'{"store_url": "\xff"}')  # not UTF-8
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_settings(path)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("no_colon", "expected 'module:function'"),
        ("tests.worker.nope:make", "cannot import module"),
        ("tests.worker.rules_module:missing", "has no attribute 'missing'"),
        ("tests.worker.rules_module:broken", "raised: cannot build rules"),
    ],
)
def test_bad_entry_point(entry: str, message: str) -> None:
    settings = load_settings(None, rules_entrypoint=entry)
    with pytest.raises(ConfigError, match="rules_entrypoint") as info:
        build_rules(settings, NO_JUDGE)
    assert message in str(info.value)


def test_rules_from_entry_point_with_custom_build_case() -> None:
    settings = load_settings(None, rules_entrypoint="tests.worker.rules_module:make_rules")
    rules = build_rules(settings, NO_JUDGE)
    assert [r.name for r in rules] == ["custom"]
    assert rules[0].build_case is custom_case


def test_build_case_from_config_and_bad_build_case() -> None:
    rule = {"metric": "bias", "build_case": "tests.worker.rules_module:custom_case"}
    rules = build_rules(load_settings(None, rules=[rule]), NO_JUDGE)
    assert rules[0].build_case is custom_case
    bad = {"metric": "bias", "build_case": "tests.worker.rules_module:nothing"}
    with pytest.raises(ConfigError, match=r"rules\.0\.build_case"):
        build_rules(load_settings(None, rules=[bad]), NO_JUDGE)


def test_bad_metric_params_name_the_rule() -> None:
    rule = {"metric": "bias", "params": {"no_such_param": 1}}
    with pytest.raises(ConfigError, match=r"rules\.0\.params"):
        build_rules(load_settings(None, rules=[rule]), NO_JUDGE)


def test_no_rules_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no rules"):
        build_rules(load_settings(None), NO_JUDGE)


def test_store_url_in_logs_hides_passwords_in_user_info_and_parameters() -> None:
    from spanjudge._core.urls import redact_url as _safe_url

    assert _safe_url("postgresql://u:s3cret@h:5432/db?password=x2&sslmode=require") == (
        "postgresql://u:***@h:5432/db?password=***&sslmode=require"
    )
    assert _safe_url("postgresql:///db?host=/run/pg&PASSWORD=p%40ss") == (
        "postgresql:///db?host=/run/pg&PASSWORD=***"
    )
    assert _safe_url("sqlite:///./spanjudge.db") == "sqlite:///./spanjudge.db"
    assert _safe_url("postgresql://u@h/db") == "postgresql://u@h/db"
