"""A subscribe request, parsed and validated once: the plan the hub, the subscription and
its sender all work from.

:func:`plan_subscription` resolves the topics, compiles the filter, parses the bookmark,
the pagination (a window's order), the conflation interval and key, the select list and
delta rules (the :class:`~processor.subscriptions.shape.MessageShape`), and checks every
option against the others, raising an InvalidRequestError that names the option. Nothing
is parsed again later: a replace builds a new plan and the subscription takes it whole.
What depends on the service's state (caught up, how many subscriptions) is the hub's to
check when it admits the plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from processor.changelog.bookmarks import Bookmark, parse_bookmark
from processor.errors import InvalidRequestError
from processor.expr import Expression
from processor.expr.ast import OrderKey
from processor.messages import Codec
from processor.security import OPEN, RequestContext
from processor.security.reads import entitled, read_restriction
from processor.subscriptions.conflation import KeyOf, key_function, parse_interval
from processor.subscriptions.model import DEFAULT_MAX_BACKLOG, MAX_MAX_BACKLOG, SubscribeRequest
from processor.subscriptions.shape import MessageShape
from processor.subscriptions.window import check_pagination, check_window_filter, is_paginated
from processor.topology.model import PlainTopic, SowTopic, Topic, Topology
from processor.topology.topics import (
    is_pattern,
    resolve_subscribed_topics,
    restricted,
    topic_restriction,
)

#: Compiles a filter for the topics it runs on (the dispatcher shares equal filters).
Compile = Callable[[list[Topic], str], "Expression | None"]


@dataclass(frozen=True, slots=True)
class SubscriptionPlan:
    """What one subscribe or sow_and_subscribe asks for, checked (module doc).

    ``request`` is the request as served: on plain topics only, ``oof`` and
    ``no_empties`` are off (their messages are not records that change). ``with_query``
    is False for a sow_and_subscribe on plain topics only (no records to return).
    ``unheld`` names the plain topics among ``topics``: their messages are delivered and
    never held. ``order`` is a paginated window's order (None: not paginated).
    """

    request: SubscribeRequest
    with_query: bool
    topics: tuple[Topic, ...]
    expression: Expression | None
    bookmark: Bookmark
    order: tuple[OrderKey, ...] | None
    interval_s: float | None
    key_of: KeyOf | None
    shape: MessageShape | None
    unheld: frozenset[str]
    max_backlog: int
    #: Who subscribed, and the rights its filter was planned with (a reload of the
    #: entitlements re-plans the subscription with the new ones).
    context: RequestContext = OPEN

    @property
    def paginated(self) -> bool:
        return self.order is not None

    @property
    def plain_only(self) -> bool:
        return len(self.unheld) == len(self.topics)

    @property
    def replaying(self) -> bool:
        """A bookmark that replays the log (not "now")."""
        return not self.bookmark.now

    def sow_topics(self) -> list[SowTopic]:
        return [t for t in self.topics if isinstance(t, SowTopic)]


def plan_subscription(
    request: SubscribeRequest,
    *,
    with_query: bool,
    topology: Topology,
    codecs: Mapping[str, Codec],
    compile_filter: Compile,
    replacing: bool = False,
    context: RequestContext = OPEN,
) -> SubscriptionPlan:
    """The plan of ``request`` (a sow_and_subscribe when ``with_query``); raises
    InvalidRequestError naming what is wrong and what to do, NotEntitledError when the
    caller may not read the topic. The caller's entitlement filter is AND-ed into the
    subscription's filter, so every path that reads through the plan (the query phase,
    live changes, OOF, windows, conflation, replays) gets it."""
    if request.replace and not replacing:
        raise InvalidRequestError(
            "replace=true replaces a live subscription of a Session: send it as a "
            "session command with that subscription's sub_id"
        )
    order = check_pagination(request, with_query=with_query)
    interval = parse_interval(request.conflation)
    if interval is None and request.conflation_key.strip():
        raise InvalidRequestError(
            f"conflation_key {request.conflation_key!r} needs a conflation interval "
            "(conflation=250ms, 1s, ...)"
        )
    key_of = None if interval is None else key_function(request, dict(codecs))
    topics = resolve_subscribed_topics(topology, request.topic)
    if request.max_backlog < 0 or request.max_backlog > MAX_MAX_BACKLOG:
        raise InvalidRequestError(
            f"max_backlog {request.max_backlog} is out of range: use 1 to "
            f"{MAX_MAX_BACKLOG} (0 means the default, {DEFAULT_MAX_BACKLOG})"
        )
    restriction = topic_restriction(topology, request.topic)
    entitlement = read_restriction(context.rights, topology, request.topic)
    if restriction is not None or entitlement is not None:  # the subscriber's filter alone
        compile_filter(topics, request.filter)
    text = entitled(restricted(request.filter, restriction), entitlement)
    expression = compile_filter(topics, text)
    unheld = frozenset(t.name for t in topics if isinstance(t, PlainTopic))
    paginated = is_paginated(request)
    if paginated:
        if (is_pattern(request.topic) and request.topic not in topology.topics) or unheld:
            raise InvalidRequestError(
                f"a paginated subscription reads one literal SOW topic; {request.topic!r} "
                "is a regular expression or a topic without a SOW"
            )
        check_window_filter(request, expression)
    shape = MessageShape.for_request(
        topics,
        codecs,
        select=request.select,
        delta=request.delta,
        no_empties=request.no_empties,
        text_form=request.text_form,
    )
    bookmark = parse_bookmark(request.bookmark)
    plain_only = len(unheld) == len(topics)
    if plain_only:
        request = dataclasses.replace(request, oof=False, no_empties=False)
    return SubscriptionPlan(
        request=request,
        with_query=with_query and not plain_only,
        topics=tuple(topics),
        expression=expression,
        bookmark=bookmark,
        order=order if paginated and with_query else None,
        interval_s=interval,
        key_of=key_of,
        shape=shape,
        unheld=unheld,
        max_backlog=request.max_backlog or DEFAULT_MAX_BACKLOG,
        context=context,
    )


def refuse_with_replay(request: SubscribeRequest, what: str) -> None:
    """Options a replaying subscription cannot have (spec 3.10: bookmark delta
    subscriptions are rejected; a replayed window is not built)."""
    refused = [name for name in ("delta", "replace") if getattr(request, name)]
    if request.skip_n is not None:
        refused.append("skip_n (a paginated window)")
    if refused:
        raise InvalidRequestError(
            f"{what} cannot take {', '.join(refused)}: replay without it, or subscribe "
            "from now (no bookmark)"
        )
