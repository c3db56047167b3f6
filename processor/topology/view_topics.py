"""Views as SOW topics: each view of a topology is also a :class:`SowTopic` (its ``view``
set), so everything that serves a SOW topic (the replica, queries, subscriptions, Spark,
recovery) serves a view the same way; only the processor derives its records instead of
reading them from publishers (:mod:`processor.views`).

* The view topic is named as the view, has its message type, KeyDomain and hash indexes,
  plus a hash index of each Grouping field that the Projection writes at the same path
  (seed 002: "Grouping fields are indexed automatically").
* Its partitions: the view's own (YAML ``partitions``), else as many as the underlying
  topic with the most.
* :func:`underlying_topics` resolves what a view reads in the assembled topology, where
  topics sharing a name across message types are scoped (``[json].[orders]``).
"""

from __future__ import annotations

from collections.abc import Mapping

from processor.errors import TopologyError
from processor.expr import ast, clauses
from processor.topology.model import (
    ConflatedTopicSpec,
    HashIndexSpec,
    SowTopic,
    Topic,
    ViewSpec,
    message_format,
)


def view_topic(view: ViewSpec, topics: Mapping[str, Topic]) -> SowTopic:
    """The SOW topic holding ``view``'s records; ``topics`` are the topics (SOW topics
    and views) defined before it, by name as configured (not yet scoped). A view that
    reads a queue is not served (:mod:`processor.topology.unserved`)."""
    partitions = view.partitions or max(
        (topics[ref.name].partitions for ref in view.underlying if ref.name in topics),
        default=1,
    )
    indexed = {index.keys for index in view.hash_indexes}
    automatic = tuple(
        HashIndexSpec((path,)) for path in _grouped_outputs(view) if (path,) not in indexed
    )
    return SowTopic(
        name=view.name,
        message_type=view.message_type,
        schema=view.schema,
        kafka_topic=view.kafka_topic,
        partitions=partitions,
        key_domain=view.key_domain,
        hash_indexes=(*view.hash_indexes, *automatic),
        view=view,
        upsert=view.upsert,
    )


def conflated_topic(spec: ConflatedTopicSpec, topics: Mapping[str, Topic]) -> SowTopic:
    """The SOW topic holding a conflated topic's records: the underlying's partitions
    (each record stays on its SowKey's partition) and message type, and the conflated
    topic's Enrichment (applied to each copy as it is written). With a ``TopicFormat``
    it stores the copy of each topic its Pattern underlying topic stores, each under its
    formatted name (:func:`processor.topology.topics.pattern_topic`)."""
    underlying = topics.get(spec.underlying)
    partitions = underlying.partitions if underlying is not None else 1
    fmt = (
        message_format(underlying)
        if underlying is not None
        else {"message_type": spec.message_type, "schema": spec.schema}
    )
    return SowTopic(
        name=spec.name,
        **fmt,
        partitions=partitions,
        hash_indexes=spec.hash_indexes,
        enrichment=spec.enrichment,
        conflated=spec,
    )


def _grouped_outputs(view: ViewSpec) -> list[str]:
    """Grouping field paths that the projection writes unchanged at the same path."""
    written: set[tuple[ast.Step, ...]] = set()
    for text in view.projection:
        for field in clauses.parse_projection(text):
            if isinstance(field.expr, ast.Identifier) and field.expr.steps == field.target.steps:
                written.add(field.target.steps)
    return [
        "/" + "/".join(str(step) for step in group.steps)
        for text in view.grouping
        for group in clauses.parse_grouping(text)
        if group.steps in written and all(isinstance(step, str) for step in group.steps)
    ]


def underlying_topics(view: ViewSpec, topics: Mapping[str, SowTopic]) -> list[SowTopic]:
    """The SOW topics (or views) ``view`` reads, in the order of ``view.underlying``.

    A name shared by topics of several message types is scoped in the topology
    (``[json].[orders]``): the reference's message type picks one, else the one that is
    not the view itself."""
    found: list[SowTopic] = []
    for ref in view.underlying:
        exact = topics.get(ref.name)
        if (
            exact is not None
            and exact.view is not view
            and (ref.message_type is None or exact.message_type == ref.message_type)
        ):
            found.append(exact)
            continue
        scoped = [
            topic
            for topic in topics.values()
            if topic.name.endswith(f".[{ref.name}]")
            and not _is_view(topic, view)
            and (ref.message_type is None or topic.message_type == ref.message_type)
        ]
        if len(scoped) != 1:
            raise TopologyError(
                f"view {view.name!r} reads {ref.name!r}: "
                + ("no such SOW topic or view" if not scoped else "several topics bear the name")
                + "; name the message type ([json].[name])",
                source=view.source,
                where=view.where,
            )
        found.append(scoped[0])
    return found


def conflated_underlying(spec: ConflatedTopicSpec, topics: Mapping[str, SowTopic]) -> SowTopic:
    """The SOW topic (or view, or conflated topic) a conflated topic copies."""
    topic = topics.get(spec.underlying)
    if topic is None or topic.conflated is spec:
        raise TopologyError(
            f"conflated topic {spec.name!r} reads {spec.underlying!r}, which is no SOW "
            "topic, view or conflated topic",
            source=spec.source,
            where=spec.where,
        )
    return topic


def _is_view(topic: SowTopic, view: ViewSpec) -> bool:
    """Whether ``topic`` holds ``view``'s records (views are scoped like topics)."""
    return topic.view is not None and (topic.view.name, topic.view.message_type) == (
        view.name,
        view.message_type,
    )
