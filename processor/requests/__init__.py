"""What a request does, whatever transport carried it (docs/architecture.md).

A query answered (``queries``), a subscription's changes shaped and taken off its queue
(``changes``), a sow_delete on a SOW topic or a queue (``deletes``), the event topics a
service publishes about its clients and its SOW (``events``). The transports in
``server/`` (gRPC) and ``http/`` (HTTP and Server-Sent Events, the console) build the
caller's :class:`~processor.security.RequestContext`, call these, and turn what they
return into their own messages; a failure's kind (``SowError.failure``) becomes each
transport's own status.
"""
