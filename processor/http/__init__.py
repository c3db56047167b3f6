"""The HTTP transport beside gRPC's (``server/``): the web console and its JSON and
Server-Sent Events API, mounted on the metrics endpoint (docs/console.md). Thin: the
request code is ``processor/requests``; this turns HTTP into its calls and its answers
into JSON."""
