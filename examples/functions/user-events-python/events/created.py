# Relay gives each invocation its W3C trace context in TRACEPARENT (and
# TRACESTATE when the event came with one). With the OpenTelemetry SDK
# (opentelemetry-api, opentelemetry-sdk in requirements.txt), a span of the
# handler continues Relay's trace:
#
#   from opentelemetry import trace
#   from opentelemetry.propagate import extract
#   parent = extract({"traceparent": os.environ.get("TRACEPARENT", ""),
#                     "tracestate": os.environ.get("TRACESTATE", "")})
#   with trace.get_tracer(__name__).start_as_current_span("user created", context=parent):
#       ...
#
# (docs/operations.md, "Tracing").


def handler(event):
    user = event["new_image"]
    print(f"User created: {user['id']}")
