"""Suite-wide settings: nothing here may reach the network."""

import os

# litellm must never fetch its cost map from the internet.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# An OTLP endpoint inherited from the developer's shell must not receive test spans.
for _name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
    os.environ.pop(_name, None)
