// Runs the interop scenario with the Vercel AI SDK (v5) and its built-in OpenTelemetry telemetry
// (`experimental_telemetry`), exporting spans with the standard OTLP/HTTP protobuf exporter.
// Started by ../vercel-ai.py, which passes the fake OpenAI server (OPENAI_BASE_URL), the capture
// server (INTEROP_TRACES_URL) and the scenario turns (INTEROP_SCENARIO, JSON) in the environment;
// it prints the answers as one JSON line on stdout.
//
// The app retrieves by itself, with no span of its own: the AI SDK has no retrieval notion, so
// the retrieved texts reach the trace only inside the system prompt (as in a real AI SDK app
// without a traced retriever). @opentelemetry/api is pinned to the exact version `ai` depends on,
// so the SDK and `ai` share one API instance (a newer global API hides the provider from `ai`).
import { trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { generateText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';

const scenario = JSON.parse(process.env.INTEROP_SCENARIO);
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'interop-vercel-ai' }),
  spanProcessors: [
    new BatchSpanProcessor(new OTLPTraceExporter({ url: process.env.INTEROP_TRACES_URL })),
  ],
});
provider.register();
if (trace.getTracerProvider().getDelegate?.() !== provider) {
  throw new Error('the global tracer provider is not ours: @opentelemetry/api version clash?');
}

const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'sk-interop-fake' });
const outputs = [];
for (const turn of scenario.turns) {
  const context = turn.documents.map((d) => d.text).join('\n');
  // The AI SDK's documented session marking: telemetry metadata (ai.telemetry.metadata.*).
  const metadata = { userId: scenario.user_id };
  if (turn.session_id) metadata.sessionId = turn.session_id;
  const result = await generateText({
    model: openai.chat(scenario.model),
    system: scenario.system_template.replace('{context}', context),
    prompt: turn.question,
    experimental_telemetry: { isEnabled: true, functionId: scenario.agent_name, metadata },
  });
  outputs.push(result.text);
}
await provider.forceFlush();
await provider.shutdown();
process.stdout.write(JSON.stringify(outputs) + '\n');
