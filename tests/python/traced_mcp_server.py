"""An MCP server that records its own spans: the `mcp` SDK's MCPServer (whose
server side opens a span per request, parented by the `traceparent` in the
request's `params._meta`) with the OpenTelemetry SDK exporting them over
OTLP/HTTP. The upstream of test_tracing.py's gateway.

Usage: python traced_mcp_server.py PORT OTLP_ENDPOINT
"""
import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from mcp.server.mcpserver import MCPServer

port, endpoint = int(sys.argv[1]), sys.argv[2]
provider = TracerProvider(resource=Resource.create({"service.name": "traced-mcp-server"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("traced-mcp-server")
server = MCPServer("traced")


@server.tool()
def echo(text: str) -> str:
    """Says the text back, inside a span of its own."""
    with tracer.start_as_current_span("echo body"):
        return text


server.run(transport="streamable-http", host="127.0.0.1", port=port)
