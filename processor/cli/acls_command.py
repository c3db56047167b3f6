"""``sow acls``: the Kafka ACLs a component needs, least privilege, for a topology and
its settings, as ``kafka-acls.sh`` lines or a table (docs/security.md, "Kafka ACLs")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from processor.config import Settings

#: The components ``--component`` takes (processor.log.kafka.acls.COMPONENTS).
COMPONENTS = (
    "processor",
    "query-service",
    "serve",
    "direct-publisher",
    "spark-reader",
    "faust-table",
)


def add_acls_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = (
        "Print the Kafka ACLs a component needs for the topology, least privilege: "
        "`kafka-acls.sh` lines to run as an admin of the cluster, or a table. Topics are "
        "named exactly; the processors' transactional ids and a Faust app's own names are "
        "prefixes. The group id and dead-letter topic come from the flags or the "
        "environment, as sow serve reads them."
    )
    command = sub.add_parser(
        "acls", help="Print the Kafka ACLs a component needs.", description=text
    )
    command.add_argument("--principal", default="User:sow", help="e.g. User:sow-processor")
    command.add_argument(
        "--component",
        action="append",
        choices=COMPONENTS,
        help="processor, query-service, serve (both), direct-publisher, spark-reader, "
        "faust-table; repeat for several (default: serve)",
    )
    command.add_argument("--topology", type=Path, help="a topology file or directory")
    command.add_argument("--group-id", help="the processors' consumer group (SOW_GROUP_ID)")
    command.add_argument("--bootstrap-servers", help="put in the printed lines")
    command.add_argument("--faust-app-id", default="sow-faust", help="faust.App's id")
    command.add_argument(
        "--spark-read",
        choices=("changelog", "input"),
        default="changelog",
        help="the Spark reader's read option",
    )
    command.add_argument(
        "--format", choices=("commands", "table"), default="commands", help="default: commands"
    )


def cmd_acls(args: argparse.Namespace) -> int:
    from processor.log.kafka.acls import AclContext, acls_command, component_acls, markdown_table
    from processor.topology.loader import load_topology

    settings = Settings.from_env(
        topology=args.topology, group_id=args.group_id, bootstrap_servers=args.bootstrap_servers
    )
    topology = load_topology(settings.topology)
    context = AclContext(
        group_id=settings.group_id,
        dead_letter_topic=settings.dead_letter_topic,
        spark_read=args.spark_read,
        faust_app_id=args.faust_app_id,
        event_topics=settings.event_topics,
        event_topic_prefix=settings.event_topic_prefix,
    )
    for component in args.component or ["serve"]:
        acls = component_acls(component, topology, context)
        if args.format == "table":
            sys.stdout.write(f"{component} ({args.principal}):\n\n{markdown_table(acls)}\n")
            continue
        sys.stdout.write(f"# {component}: {len(acls)} ACLs for {args.principal}\n")
        bootstrap = settings.bootstrap_servers or "BROKER:9092"
        for acl in acls:
            sys.stdout.write(acls_command(acl, args.principal, bootstrap) + "\n")
    return 0
