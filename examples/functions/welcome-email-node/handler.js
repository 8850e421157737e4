// Relay gives each invocation its W3C trace context in TRACEPARENT (and
// TRACESTATE when the event came with one). With the OpenTelemetry SDK
// (npm install @opentelemetry/api @opentelemetry/sdk-trace-base ...), a
// span of the handler continues Relay's trace:
//
//   const parent = propagation.extract(context.active(),
//     { traceparent: process.env.TRACEPARENT, tracestate: process.env.TRACESTATE });
//   const span = tracer.startSpan('send welcome email', {}, parent);
//
// (docs/operations.md, "Tracing"; tests/it/trace.sh runs such a handler.)
export async function handler(event) {
  const user = event.new_image;
  console.log(`Sending welcome email to ${user.email}`);
}
